#include <gtest/gtest.h>

#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

TEST(HandLoopTest, EngineServesALoopItDoesNotOwn) {
  const auto result = test::run_command(BASIN_HAND_LOOP_EXE);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("trace: sam/after_sharding"), std::string::npos) << result.output;
}

// The closure protocol serves a hand-written closure as it serves the
// trainer's: ESAM's per-sample losses, forward alone and chosen samples,
// mSAM's parts, SAF's sample ids. Each changes the loop's losses.
TEST(HandLoopTest, EveryKindOfAlgorithmRunsInTheLoop) {
  const auto losses_line = [](const std::string& output) { return output.substr(output.rfind("mean loss")); };
  const auto plain = test::run_command(std::string(BASIN_HAND_LOOP_EXE) + " '{}'");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  for (const char* algorithms : {R"({"esam": {"beta": 0.7}})", R"({"msam": {"m": 2}})",
                                 R"({"saf": {"epochs_ago": 1, "start_epoch": 1}})", R"({"mesa": {"start_epoch": -1}})"}) {
    const auto result = test::run_command(std::string(BASIN_HAND_LOOP_EXE) + " '" + algorithms + "'");
    EXPECT_EQ(result.exit_code, 0) << algorithms << "\n" << result.output;
    EXPECT_NE(losses_line(result.output), losses_line(plain.output)) << algorithms << " changed nothing";
  }
}

}  // namespace
}  // namespace basin
