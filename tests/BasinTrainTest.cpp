#include <gtest/gtest.h>

#include <filesystem>

#include "basin/core/config/config.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

const std::string kTrain = BASIN_TRAIN_EXE;
const std::string kConfigs = std::string(BASIN_SOURCE_DIR) + "/examples/configs";

std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> records;
  std::istringstream lines(test::read_text(path));
  for (std::string line; std::getline(lines, line);) records.push_back(Json::parse(line));
  return records;
}

TEST(BasinTrainTest, TrainsTheSmokeConfigAndWritesMetricsAndSummary) {
  test::TempDir dir;
  const std::string run_dir = dir.file("run");
  const auto result = test::run_command(kTrain + " --config " + kConfigs + "/synthetic_smoke.json --run-dir " + run_dir);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("test accuracy"), std::string::npos);

  const auto records = read_jsonl(run_dir + "/metrics.jsonl");
  std::vector<Json> steps, epochs;
  for (const auto& r : records) (r.contains("test_accuracy") ? epochs : steps).push_back(r);
  ASSERT_GE(steps.size(), 3u);
  for (const auto& r : steps) {
    for (const char* key : {"step", "epoch", "loss", "lr", "step_seconds"}) EXPECT_TRUE(r.contains(key)) << key;
  }
  ASSERT_EQ(epochs.size(), 3u);
  for (const auto& r : epochs) {
    EXPECT_TRUE(r.contains("test_loss"));
    ASSERT_TRUE(r.contains("train_seconds"));
    EXPECT_GT(r["train_seconds"].get<double>(), 0);
  }

  const Json summary = Json::parse(test::read_text(run_dir + "/summary.json"));
  for (const char* key : {"steps", "epochs", "final_train_loss", "test_accuracy", "skipped_steps", "wall_seconds"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
  EXPECT_EQ(summary["steps"], 48);
  EXPECT_EQ(summary["epochs"], 3);
  EXPECT_EQ(summary["skipped_steps"], 0);
  // Training worked: the last epoch's mean loss is well below the first logged loss.
  EXPECT_LT(summary["final_train_loss"].get<double>(), 0.7 * steps.front()["loss"].get<double>());
  EXPECT_TRUE(std::filesystem::exists(run_dir + "/config.json"));
}

TEST(BasinTrainTest, SetOverridesAnyKey) {
  test::TempDir dir;
  const auto result = test::run_command(kTrain + " --config " + kConfigs + "/synthetic_smoke.json --run-dir " +
                                        dir.file("run") + " --set max_steps=5 --set model.hidden=[8]");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const Json summary = Json::parse(test::read_text(dir.file("run/summary.json")));
  EXPECT_EQ(summary["steps"], 5);
  const Json config = Json::parse(test::read_text(dir.file("run/config.json")));
  EXPECT_EQ(config["model"]["hidden"], Json::parse("[8]"));
}

TEST(BasinTrainTest, BadInputExitsTwoWithOneLineAndTouchesNoRunFiles) {
  test::TempDir dir;
  const std::string run_dir = dir.file("run");
  std::filesystem::create_directories(run_dir);
  test::write_text(run_dir + "/notes.txt", "keep me");
  test::write_text(dir.file("broken.json"), "{\n  \"seed\": 1,\n  oops\n}");

  struct Case {
    std::string args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"--config " + dir.file("broken.json"), "broken.json:3:3"},
      {"--config " + dir.file("absent.json"), "absent.json"},
      {"--config " + kConfigs + "/synthetic_smoke.json --set optimizer.lr=-1", "'optimizer.lr'"},
      {"--config " + kConfigs + "/synthetic_smoke.json --set model.name=vit",
       "known: cnn, gemma2, gemma3, gpt, llama, mistral, mlp, qwen2, qwen3, resnet, torchscript"},
      {"--config " + kConfigs + "/synthetic_smoke.json --set optimizer.lrr=1", "'optimizer.lrr' is not known"},
      {"--config " + kConfigs + "/synthetic_smoke.json --set data.batch_size=0", "'data.batch_size'"},
      {"--config " + kConfigs + "/synthetic_smoke.json --set data.root=/x", "'data.root' is not known"},
  };
  for (const auto& c : cases) {
    const auto result = test::run_command(kTrain + " " + c.args + " --run-dir " + run_dir);
    EXPECT_EQ(result.exit_code, 2) << c.args << "\n" << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << c.args << "\n" << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  }
  // Nothing was written into, or removed from, the existing run directory.
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir)) files.push_back(entry.path().filename());
  EXPECT_EQ(files, std::vector<std::string>{"notes.txt"});
  EXPECT_EQ(test::read_text(run_dir + "/notes.txt"), "keep me");
}

TEST(BasinTrainTest, RefusesToOverwriteAnEarlierRun) {
  test::TempDir dir;
  const std::string run_dir = dir.file("run");
  std::filesystem::create_directories(run_dir);
  test::write_text(run_dir + "/summary.json", "{\"steps\": 1}");
  const std::string base = kTrain + " --config " + kConfigs + "/synthetic_smoke.json --set max_steps=2 --run-dir " + run_dir;
  auto result = test::run_command(base);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("--overwrite"), std::string::npos) << result.output;
  EXPECT_EQ(test::read_text(run_dir + "/summary.json"), "{\"steps\": 1}");
  result = test::run_command(base + " --overwrite");
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST(BasinTrainTest, HelpDocumentsEveryOption) {
  const auto result = test::run_command(kTrain + " --help");
  EXPECT_EQ(result.exit_code, 0);
  for (const char* option : {"--config", "--set", "--run-dir", "--overwrite", "--log-level"}) {
    EXPECT_NE(result.output.find(option), std::string::npos) << option;
  }
}

TEST(BasinTrainTest, DebugLogShowsTheEngineTrace) {
  test::TempDir dir;
  const auto result =
      test::run_command(kTrain + " --config " + kConfigs + "/synthetic_smoke.json --set max_steps=2 --log-level debug " +
                        "--set 'algorithms={\"sam\": {}}' --run-dir " + dir.file("run"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("engine: sam/after_sharding"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace basin
