#include <gtest/gtest.h>

#include "test_util.h"

namespace basin {
namespace {

TEST(HandLoopTest, EngineServesALoopItDoesNotOwn) {
  const auto result = test::run_command(BASIN_HAND_LOOP_EXE);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("trace: sam/after_sharding"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace basin
