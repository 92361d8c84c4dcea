// "loss": "model" (a TorchScript module's forward(x, y) returns its loss)
// and the check that runs the first batch through the model before
// training: an output that does not fit the data is one line and exit 2.
#include <gtest/gtest.h>

#include <algorithm>

#include "basin/core/config/config.h"
#include "python_models.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

const std::string kTrain = BASIN_TRAIN_EXE;

test::RunResult train(const test::TempDir& dir, const Json& config, const std::string& run_dir) {
  test::write_text(dir.file("config.json"), config.dump());
  return test::run_command(kTrain + " --config " + dir.file("config.json") + " --run-dir " + dir.file(run_dir));
}

void expect_one_line_exit_two(const test::RunResult& run, const std::vector<std::string>& says) {
  EXPECT_EQ(run.exit_code, 2) << run.output;
  for (const auto& text : says) EXPECT_NE(run.output.find(text), std::string::npos) << "no '" << text << "' in\n" << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
}

// The same module trained with basin's cross-entropy on forward(x) and with
// its own forward(x, y), the same cross-entropy: the same weights, bit for
// bit, and the same test accuracy.
TEST(ModelLossTest, AModulesOwnCrossEntropyTrainsAsTheConfigsCrossEntropy) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  Json config = test::python_model_config(dir, "lossnet.pt");
  config["data"]["microbatches"] = 2;
  const auto configs = train(dir, config, "configs");
  ASSERT_EQ(configs.exit_code, 0) << configs.output;
  config["loss"] = "model";
  const auto own = train(dir, config, "own");
  ASSERT_EQ(own.exit_code, 0) << own.output;
  const Json a = Json::parse(test::read_text(dir.file("configs/summary.json")));
  const Json b = Json::parse(test::read_text(dir.file("own/summary.json")));
  EXPECT_EQ(a["test_accuracy"], b["test_accuracy"]);
  EXPECT_GT(b["test_accuracy"].get<double>(), 0.5);  // 3 classes: chance is 1/3
  EXPECT_NEAR(a["test_loss"].get<double>(), b["test_loss"].get<double>(), 1e-6);
  const auto python = test::run_command(
      "env -C " + dir.path().string() + " /usr/bin/python3 -c \"import torch\n"
      "a = torch.load('configs/state_dict.pt', weights_only=True); b = torch.load('own/state_dict.pt', weights_only=True)\n"
      "assert a.keys() == b.keys()\n"
      "for k in a: assert torch.equal(a[k], b[k]), k\n"
      "assert not torch.equal(a['head.weight'], torch.jit.load('lossnet.pt').head.weight)\n"
      "print('python: the same weights')\"");
  EXPECT_EQ(python.exit_code, 0) << python.output;
}

// forward(x, y) alone: the module's loss trains it, and with no logits the
// accuracy is not measured (null in summary.json); the test loss is the
// module's, as Python computes it from model.pt.
TEST(ModelLossTest, AModuleThatNeedsTheTargetsReportsItsTestLossAndNoAccuracy) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  Json config = test::python_model_config(dir, "ownloss.pt");
  config["loss"] = "model";
  config["data"]["eval_batch_size"] = 1000;  // one batch: the mean Python computes
  const auto run = train(dir, config, "run");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("test loss"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("nan"), std::string::npos) << run.output;
  const Json summary = Json::parse(test::read_text(dir.file("run/summary.json")));
  EXPECT_TRUE(summary["test_accuracy"].is_null()) << summary.dump();
  const auto python = test::run_command(
      "env -C " + dir.path().string() + " /usr/bin/python3 -c \"import sys, torch\n"
      "m = torch.jit.load('run/model.pt').eval(); d = torch.load('test.pt'); start = torch.jit.load('ownloss.pt').eval()\n"
      "with torch.no_grad(): loss, before = m(d['x'], d['y']).item(), start(d['x'], d['y']).item()\n"
      "assert abs(loss - float(sys.argv[1])) < 1e-6, (loss, sys.argv[1])\n"
      "assert loss < before, (loss, before)\n"
      "print('python: test loss', loss, 'from', before)\" " + summary["test_loss"].dump());
  EXPECT_EQ(python.exit_code, 0) << python.output;
}

TEST(ModelLossTest, WhatCannotWorkWithTheModelsLossIsOneLineAndExitTwo) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  // basin's own models compute logits only.
  Json config = test::smoke_config();
  config["loss"] = "model";
  expect_one_line_exit_two(train(dir, config, "a"), {"'loss'", "forward(x, y)"});
  // A module that needs the targets, under the config's loss.
  config = test::python_model_config(dir, "ownloss.pt");
  expect_one_line_exit_two(train(dir, config, "b"), {"'loss'", "needs the targets", "\"model\""});
  // ESAM's data selection needs each sample's loss; SAF and MESA compare outputs.
  config = test::python_model_config(dir, "lossnet.pt");
  config["loss"] = "model";
  config["algorithms"] = Json::parse(R"({"esam": {"gamma": 0.5}})");
  expect_one_line_exit_two(train(dir, config, "c"), {"'algorithms.esam.gamma'", "\"loss\": \"model\""});
  for (const std::string name : {"saf", "mesa"}) {
    config["algorithms"] = Json::object({{name, Json::object()}});
    expect_one_line_exit_two(train(dir, config, "d" + name), {"'algorithms." + name + "'", "\"loss\": \"model\""});
  }
  // A forward(x, y) that returns something other than a scalar loss.
  config = test::python_model_config(dir, "lossnet.pt");
  config["loss"] = "model";
  config.erase("algorithms");
  test::write_text(dir.file("vector_loss.py"),
                   "import torch, models\nclass VectorLoss(models.Net):\n"
                   "    def forward(self, x, y):\n"
                   "        return torch.nn.functional.cross_entropy(self.head(self.conv(x).flatten(1)), y, reduction='none')\n");
  const auto python = test::run_command("env -C " + dir.path().string() + " /usr/bin/python3 -c \"import torch, vector_loss\n"
                                        "torch.jit.script(vector_loss.VectorLoss()).save('vector.pt')\"");
  ASSERT_EQ(python.exit_code, 0) << python.output;
  config["model"]["torchscript"] = dir.file("vector.pt");
  expect_one_line_exit_two(train(dir, config, "e"), {"'loss'", "shape [32]", "scalar"});
}

// 3 logits for 5 classes, and a model whose layers do not fit the samples:
// one line each, naming the data's classes and shapes, before any training.
TEST(ModelLossTest, AnOutputThatDoesNotFitTheDataIsOneLineNamingClassesAndShapes) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  Json config = test::python_model_config(dir, "net.pt");
  config["data"]["num_classes"] = 5;
  auto run = train(dir, config, "a");
  expect_one_line_exit_two(run, {"'model'", "[32, 3]", "[32, 5]", "5 classes", "[1, 4, 4]"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("a/metrics.jsonl"))) << "it trained first";
  // mlp.pt takes 16 features; the synthetic samples have 36.
  config = test::smoke_config();
  config["model"] = {{"torchscript", dir.file("mlp.pt")}};
  expect_one_line_exit_two(train(dir, config, "b"), {"'model'", "fails on a batch of 16", "[1, 6, 6]", "3 classes", "mat1"});
}

}  // namespace
}  // namespace basin
