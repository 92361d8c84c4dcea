// "data": {"name": "text"}: files read as bytes and tiled into windows of
// block_size + 1, x and y shifted by one; what does not fit is refused
// naming the key and the file; a byte-level module scripted in Python, with
// its own loss, trains on the windows under SAM.
#include <gtest/gtest.h>

#include <cmath>

#include <filesystem>
#include <fstream>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/data/dataset.h"
#include "basin/core/data/token_stream.h"
#include "python_models.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

DataSplits read(const Json& data) { return test::read_dataset("text", data); }

/// Window k of `bytes`, shifted by `shift`: bytes[k * block + shift + j], j < block.
at::Tensor expected_window(const std::string& bytes, int64_t k, int64_t block, int64_t shift) {
  std::vector<int64_t> ids;
  for (int64_t j = 0; j < block; ++j) ids.push_back(static_cast<unsigned char>(bytes[k * block + shift + j]));
  return at::tensor(ids, at::kLong);
}

void expect_windows(const TensorDataset& split, const std::string& bytes, int64_t block) {
  const int64_t count = (static_cast<int64_t>(bytes.size()) - 1) / block;
  ASSERT_EQ(split.size(), count);
  // Not held: the files are mapped as they lie, a byte per byte, and windows are cut as batches are gathered.
  ASSERT_TRUE(split.windowed());
  EXPECT_TRUE(split.per_token());
  EXPECT_EQ(split.stream().held_bytes(), 0);
  EXPECT_GE(split.stream().mapped_bytes(), static_cast<int64_t>(bytes.size()));
  // Batches carry int64 ids, in gathered order.
  const Batch all = split.slice(0, count);
  ASSERT_EQ(all.inputs.sizes(), (std::vector<int64_t>{count, block}));
  ASSERT_EQ(all.targets.sizes(), (std::vector<int64_t>{count, block}));
  EXPECT_EQ(all.inputs.scalar_type(), at::kLong);
  EXPECT_EQ(all.targets.scalar_type(), at::kLong);
  for (int64_t k = 0; k < count; ++k) {
    EXPECT_TRUE(all.inputs[k].equal(expected_window(bytes, k, block, 0))) << "x of window " << k;
    EXPECT_TRUE(all.targets[k].equal(expected_window(bytes, k, block, 1))) << "y of window " << k;
  }
  const Batch picked = split.gather({count - 1, 0});
  EXPECT_TRUE(picked.targets[0].equal(expected_window(bytes, count - 1, block, 1)));
  EXPECT_TRUE(picked.inputs[1].equal(expected_window(bytes, 0, block, 0)));
}

TEST(TextDataTest, WindowsAreTheBytesAndTheNextBytes) {
  test::TempDir dir;
  const std::string train = "The quick brown fox jumps over the lazy dog.\n\xc3\xa9t\xc3\xa9";  // UTF-8 as bytes
  const std::string test = "Pack my box with five dozen liquor jugs.";
  write(dir.file("train.txt"), train);
  write(dir.file("test.txt"), test);
  const DataSplits splits = read({{"train", dir.file("train.txt")}, {"test", dir.file("test.txt")}, {"block_size", 8}});
  expect_windows(splits.train, train, 8);
  expect_windows(splits.test, test, 8);
  EXPECT_EQ(splits.info.input_shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(splits.info.num_classes, 256);
  EXPECT_EQ(splits.train.slice(0, splits.train.size()).inputs.max().item<int64_t>(), 0xc3)
      << "bytes above 127 are ids, not negative chars";
}

TEST(TextDataTest, AFolderOrAListJoinsItsFilesInOrder) {
  test::TempDir dir;
  std::filesystem::create_directory(dir.file("corpus"));
  write(dir.file("corpus/b.txt"), "second file, ");
  write(dir.file("corpus/a.txt"), "first file, ");
  write(dir.file("more.txt"), "and a third.");
  const std::string joined = "first file, second file, and a third.";
  const DataSplits from_folder =
      read({{"train", Json::array({dir.file("corpus"), dir.file("more.txt")})}, {"test", dir.file("more.txt")}, {"block_size", 5}});
  expect_windows(from_folder.train, joined, 5);
  const DataSplits from_list = read({{"train", Json::array({dir.file("corpus/a.txt"), dir.file("corpus/b.txt"), dir.file("more.txt")})},
                                     {"test", dir.file("more.txt")},
                                     {"block_size", 5}});
  EXPECT_TRUE(from_list.train.slice(0, from_list.train.size()).inputs.equal(from_folder.train.slice(0, from_folder.train.size()).inputs));
}

TEST(TextDataTest, WithoutTestFilesTheTailIsHeldOutAndNoTrainingWindowReachesIt) {
  test::TempDir dir;
  std::string bytes;
  for (int i = 0; i < 100; ++i) bytes += static_cast<char>(i);  // each byte its own position
  write(dir.file("train.bin"), bytes);
  const DataSplits splits = read({{"train", dir.file("train.bin")}, {"block_size", 4}, {"test_fraction", 0.2}});
  expect_windows(splits.train, bytes.substr(0, 80), 4);
  expect_windows(splits.test, bytes.substr(80), 4);
  EXPECT_LT(splits.train.slice(0, splits.train.size()).targets.max().item<int64_t>(), 80);
  EXPECT_GE(splits.test.slice(0, splits.test.size()).inputs.min().item<int64_t>(), 80);
}

void expect_refused(const Json& data, const std::vector<std::string>& words) {
  test::expect_config_error([&] { read(data); }, words, data.dump());
}

TEST(TextDataTest, WhatDoesNotFitIsRefusedNamingTheKeyAndTheFile) {
  test::TempDir dir;
  write(dir.file("short.txt"), "tiny");
  write(dir.file("long.txt"), std::string(64, 'x'));
  std::filesystem::create_directory(dir.file("empty"));
  expect_refused({{"train", dir.file("missing.txt")}, {"block_size", 4}}, {"data.train", "missing.txt", "cannot read"});
  expect_refused({{"train", dir.file("long.txt")}, {"test", dir.file("short.txt")}, {"block_size", 4}},
                 {"data.test", "short.txt", "4 bytes", "block_size + 1 = 5"});
  expect_refused({{"train", dir.file("long.txt")}, {"test", dir.file("long.txt")}}, {"data.block_size"});
  expect_refused({{"train", dir.file("long.txt")}, {"block_size", 4}, {"test_fraction", 0.01}},
                 {"data.test_fraction", "block_size + 1"});
  expect_refused({{"train", dir.file("empty")}, {"block_size", 4}}, {"data.train", "holds no files"});
  expect_refused({{"train", 3}, {"block_size", 4}}, {"data.train", "a file, a folder or a list"});
  // Files are mapped as they lie on disk: a pipe or a device is none.
  expect_refused({{"train", "/dev/null"}, {"block_size", 4}}, {"data.train", "/dev/null", "not a regular file"});
}

// A bigram model (an embedding and a head) scripted in Python trains on a
// text's windows with SAM, its forward either the mean cross-entropy of its
// next-byte logits (forward(x, y), "loss": "model") or the logits [n, T, 256]
// themselves (forward(x), the config's token cross-entropy). Its test loss
// in summary.json is the one Python computes from model.pt on windows it
// cuts itself from the held-out tail, and lower than the untrained model's.
void expect_scripted_bigram_trains(bool returns_loss) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += "the cat sat on the mat. ";
  write(dir.file("corpus.txt"), corpus);
  const std::string logits = "self.head(self.embed(x))";
  const std::string mean_loss = "torch.nn.functional.cross_entropy(" + logits + ".reshape(-1, 256), y.reshape(-1))";
  // TorchScript reads a class's source from its file.
  test::write_text(dir.file("bigram.py"),
                   "import torch\n"
                   "class Bigram(torch.nn.Module):\n"
                   "    def __init__(self):\n"
                   "        super().__init__()\n"
                   "        self.embed = torch.nn.Embedding(256, 32)\n"
                   "        self.head = torch.nn.Linear(32, 256)\n" +
                       (returns_loss ? "    def forward(self, x, y):\n        return " + mean_loss + "\n"
                                     : "    def forward(self, x):\n        return " + logits + "\n"));
  const auto script = test::run_command("env -C " + dir.path().string() +
                                        " /usr/bin/python3 -c \"import torch, bigram\n"
                                        "torch.manual_seed(0); torch.jit.script(bigram.Bigram()).save('bigram.pt')\"");
  ASSERT_EQ(script.exit_code, 0) << script.output;
  Json config = test::smoke_config();
  config["model"] = {{"torchscript", dir.file("bigram.pt")}};
  if (returns_loss) config["loss"] = "model";
  config["data"] = {{"name", "text"}, {"train", dir.file("corpus.txt")}, {"block_size", 16},
                    {"batch_size", 32}, {"eval_batch_size", 1000}};
  config["optimizer"] = {{"name", "adam"}, {"lr", 0.01}};
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  test::write_text(dir.file("config.json"), config.dump());
  const auto run = test::run_command(std::string(BASIN_TRAIN_EXE) + " --config " + dir.file("config.json") +
                                     " --run-dir " + dir.file("run"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Json summary = Json::parse(test::read_text(dir.file("run/summary.json")));
  if (!returns_loss) {
    ASSERT_TRUE(summary.contains("test_perplexity")) << summary.dump();
    EXPECT_NEAR(summary["test_perplexity"].get<double>(), std::exp(summary["test_loss"].get<double>()), 1e-6);
  }
  const std::string loss_of = returns_loss ? "m(x, y)" : "torch.nn.functional.cross_entropy(m(x).reshape(-1, 256), y.reshape(-1))";
  const auto python = test::run_command(
      "env -C " + dir.path().string() + " /usr/bin/python3 -c \"import sys, torch\n"
      "data = open('corpus.txt', 'rb').read(); tail = data[len(data) - int(len(data) * 0.1):]\n"
      "starts = range(0, len(tail) - 16, 16)\n"
      "x = torch.tensor([list(tail[s:s + 16]) for s in starts]); y = torch.tensor([list(tail[s + 1:s + 17]) for s in starts])\n"
      "loss = lambda m: (" + loss_of + ").item()\n"
      "with torch.no_grad(): trained, before = loss(torch.jit.load('run/model.pt')), loss(torch.jit.load('bigram.pt'))\n"
      "assert abs(trained - float(sys.argv[1])) < 1e-5, (trained, sys.argv[1])\n"
      "assert trained < before - 1, (trained, before)\n"
      "print('python: test loss', trained, 'from', before)\" " +
      summary["test_loss"].dump());
  EXPECT_EQ(python.exit_code, 0) << python.output << run.output;
}

TEST(TextDataTest, AByteModelScriptedInPythonTrainsOnTheWindowsWithSam) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  expect_scripted_bigram_trains(/*returns_loss=*/true);
}

TEST(TextDataTest, AScriptedModelGivingLogitsPerTokenTrainsUnderTheTokenLoss) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  expect_scripted_bigram_trains(/*returns_loss=*/false);
}

}  // namespace
}  // namespace basin
