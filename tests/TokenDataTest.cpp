// Token data for language models: "tokens" files (raw uint16/uint32 ids as
// nanoGPT writes them, or a torch.save'd 1-D tensor) cut into windows,
// raw files mapped and joined into one stream whose pages do not stay
// resident; "tensors" with integer x and [N, T] y; what does not fit refused naming the
// key and the file; and a gpt trained by basin-train on token files, its
// records carrying perplexity and next-token accuracy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/data/dataset.h"
#include "basin/core/data/token_stream.h"
#include "basin/core/serialization/torch_save_file.h"
#include "basin/core/train/trainer.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

/// `ids` as raw little-endian integers of `width` bytes.
void write_raw(const std::string& path, const std::vector<int64_t>& ids, int width) {
  std::string bytes;
  for (int64_t id : ids) {
    for (int b = 0; b < width; ++b) bytes += static_cast<char>((static_cast<uint64_t>(id) >> (8 * b)) & 0xff);
  }
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<int64_t> ramp(int64_t count, int64_t step, int64_t modulo) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < count; ++i) ids.push_back((i * step) % modulo);
  return ids;
}

DataSplits read(const Json& data) {
  Params params(data, "data");
  DataSplits splits = std::move(*dataset_registry().create("tokens", params, 0));
  params.finish();
  return splits;
}

/// Window k of `ids` is ids[k * block + j] (x) and ids[k * block + 1 + j] (y).
void expect_windows(const TensorDataset& split, const std::vector<int64_t>& ids, int64_t block) {
  const int64_t count = (static_cast<int64_t>(ids.size()) - 1) / block;
  ASSERT_EQ(split.size(), count);
  ASSERT_TRUE(split.windowed()) << "windows are cut from the stream as batches are gathered";
  try {
    (void)split.inputs();
    ADD_FAILURE() << "a windowed dataset handed out samples it does not hold";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("gather(indices) or slice(begin, end)"), std::string::npos) << error.what();
  }
  EXPECT_THROW((void)split.targets(), std::logic_error);
  const Batch all = split.slice(0, count);
  ASSERT_EQ(all.inputs.scalar_type(), at::kLong);
  for (int64_t k = 0; k < count; ++k) {
    for (int64_t j = 0; j < block; ++j) {
      ASSERT_EQ(all.inputs[k][j].item<int64_t>(), ids[static_cast<std::size_t>(k * block + j)]) << k << ", " << j;
      ASSERT_EQ(all.targets[k][j].item<int64_t>(), ids[static_cast<std::size_t>(k * block + j + 1)]) << k << ", " << j;
    }
  }
}

TEST(TokenDataTest, RawIdsOfEitherWidthAndSavedTensorsAreCutIntoWindows) {
  test::TempDir dir;
  const auto train = ramp(203, 7919, 50257);  // past 32767: uint16 ids are unsigned
  const auto test = ramp(41, 31, 50257);
  write_raw(dir.file("train.bin"), train, 2);
  write_raw(dir.file("val.bin"), test, 2);
  const DataSplits narrow = read({{"train", dir.file("train.bin")}, {"test", dir.file("val.bin")}, {"block_size", 8},
                                  {"vocab_size", 50257}});
  expect_windows(narrow.train, train, 8);
  expect_windows(narrow.test, test, 8);
  EXPECT_EQ(narrow.info.num_classes, 50257);
  EXPECT_EQ(narrow.info.input_shape, (std::vector<int64_t>{8}));

  const auto wide = ramp(100, 1000003, 3000000);
  write_raw(dir.file("wide.bin"), wide, 4);
  const DataSplits from_wide = read({{"train", dir.file("wide.bin")}, {"dtype", "uint32"}, {"block_size", 4},
                                     {"test_fraction", 0.2}});
  expect_windows(from_wide.train, std::vector<int64_t>(wide.begin(), wide.begin() + 80), 4);
  expect_windows(from_wide.test, std::vector<int64_t>(wide.begin() + 80, wide.end()), 4);
  EXPECT_EQ(from_wide.info.num_classes, *std::max_element(wide.begin(), wide.end()) + 1) << "largest id + 1";

  // torch.save(ids) of a 1-D tensor, and a list joins its files in order.
  write_torch_save_file(dir.file("more.pt"), at::tensor(std::vector<int64_t>{5, 6, 7, 8}, at::kLong));
  const DataSplits joined = read({{"train", Json::array({dir.file("train.bin"), dir.file("more.pt")})},
                                  {"test", dir.file("val.bin")}, {"block_size", 8}});
  std::vector<int64_t> both = train;
  both.insert(both.end(), {5, 6, 7, 8});
  expect_windows(joined.train, both, 8);
  // Raw files are mapped, not held; a saved tensor is held, as int32.
  EXPECT_EQ(narrow.train.stream().held_bytes(), 0);
  EXPECT_EQ(narrow.train.stream().mapped_bytes(), 2 * 203);
  EXPECT_EQ(joined.train.stream().held_bytes(), 4 * 4);
}

TEST(TokenDataTest, AFolderOfFilesIsOneStreamWhoseWindowsStraddleTheFiles) {
  // Files shorter than a window, and an empty one, join the stream like any other; the held-out tail of
  // test_fraction starts inside a file.
  test::TempDir dir;
  std::filesystem::create_directory(dir.file("shards"));
  const std::vector<std::vector<int64_t>> shards = {ramp(10, 7, 60000), ramp(3, 11, 60000), {}, ramp(50, 13, 60000)};
  std::vector<int64_t> all;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    write_raw(dir.file("shards/" + std::to_string(i) + ".bin"), shards[i], 2);
    all.insert(all.end(), shards[i].begin(), shards[i].end());
  }
  const DataSplits splits = read({{"train", dir.file("shards")}, {"block_size", 4}, {"test_fraction", 0.3}});
  const auto kept = static_cast<std::ptrdiff_t>(all.size() - static_cast<std::size_t>(0.3 * static_cast<double>(all.size())));
  expect_windows(splits.train, std::vector<int64_t>(all.begin(), all.begin() + kept), 4);
  expect_windows(splits.test, std::vector<int64_t>(all.begin() + kept, all.end()), 4);
  EXPECT_EQ(splits.train.stream().mapped_bytes(), 2 * static_cast<int64_t>(all.size()));
  // Gathered in any order, a window is the same.
  const Batch picked = splits.train.gather({2, 0, 2});
  EXPECT_TRUE(picked.inputs[0].equal(picked.inputs[2]));
  EXPECT_EQ(picked.inputs[0][0].item<int64_t>(), all[8]);
  EXPECT_EQ(picked.targets[0][3].item<int64_t>(), all[12]) << "the window of ids 8 to 12 spans the first three files";
}

/// This process's resident memory, in KiB (VmRSS: file pages included, as top shows it).
int64_t resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

TEST(TokenDataTest, ReadingEveryPartOfAStreamDoesNotKeepItResident) {
  // A 256 MiB corpus (sparse: it costs no disk) read whole, window after window: without handing its
  // pages back, the process would end up holding all of it.
  test::TempDir dir;
  constexpr int64_t kBytes = int64_t{256} << 20, kWindow = int64_t{64} << 10;
  std::ofstream(dir.file("big.bin")).close();
  std::filesystem::resize_file(dir.file("big.bin"), kBytes);
  TokenStream stream;
  stream.append_file(dir.file("big.bin"), TokenType::kUint8);
  ASSERT_EQ(stream.size(), kBytes);
  const int64_t before = resident_kib();
  ASSERT_GT(before, 0);
  std::vector<int64_t> window(static_cast<std::size_t>(kWindow));
  int64_t largest = 0;
  for (int64_t at = 0; at + kWindow <= kBytes; at += kWindow) {
    stream.read(at, kWindow, window.data());
    if (at % (int64_t{4} << 20) == 0) largest = std::max(largest, resident_kib() - before);
  }
  EXPECT_LT(largest, 100 << 10) << "KiB resident beyond the start, at most, while reading 256 MiB";
}

void expect_refused(const Json& data, const std::vector<std::string>& words) {
  test::expect_config_error([&] { read(data); }, words, data.dump());
}

TEST(TokenDataTest, WhatDoesNotFitIsRefusedNamingTheKeyAndTheFile) {
  test::TempDir dir;
  auto ids = ramp(64, 3, 100);
  ids[37] = 100;
  write_raw(dir.file("ids.bin"), ids, 2);
  write_raw(dir.file("short.bin"), ramp(4, 1, 10), 2);
  std::ofstream(dir.file("odd.bin"), std::ios::binary) << "abc";
  write_torch_save_file(dir.file("matrix.pt"), at::zeros({2, 3}, at::kLong));
  write_torch_save_file(dir.file("floats.pt"), at::zeros({30}));
  expect_refused({{"train", dir.file("ids.bin")}, {"block_size", 4}, {"vocab_size", 100}},
                 {"data.train", "ids.bin", "id 100 at position 37", "data.vocab_size 100"});
  expect_refused({{"train", dir.file("ids.bin")}, {"test", dir.file("short.bin")}, {"block_size", 4}},
                 {"data.test", "short.bin", "4 tokens", "block_size + 1 = 5"});
  expect_refused({{"train", dir.file("odd.bin")}, {"block_size", 1}}, {"data.train", "odd.bin", "3 bytes", "2-byte ids"});
  expect_refused({{"train", dir.file("matrix.pt")}, {"block_size", 1}}, {"data.train", "matrix.pt", "1-D integer tensor"});
  expect_refused({{"train", dir.file("floats.pt")}, {"block_size", 1}}, {"data.train", "floats.pt", "Float"});
  expect_refused({{"train", dir.file("ids.bin")}, {"block_size", 4}, {"dtype", "int8"}}, {"data.dtype", "uint16"});
  expect_refused({{"train", dir.file("missing.bin")}, {"block_size", 4}}, {"data.train", "missing.bin", "cannot read"});
}

void save_xy(const std::string& path, const at::Tensor& x, const at::Tensor& y) {
  c10::Dict<std::string, at::Tensor> saved;
  saved.insert("x", x);
  saved.insert("y", y);
  write_torch_save_file(path, saved);
}

Json gpt_on(const Json& data) {
  Json config = test::smoke_config();
  config["data"] = data;
  config["model"] = {{"name", "gpt"}, {"n_layer", 1}, {"n_head", 2}, {"n_embd", 8}};
  return config;
}

void expect_trainer_refuses(const Json& config, const std::vector<std::string>& words) {
  test::expect_config_error([&] { Trainer trainer(config); }, words, config.dump());
}

TEST(TokenDataTest, TensorFilesTakeIntegerIdsAndTokenTargetsWithIgnoredOnes) {
  test::TempDir dir;
  at::manual_seed(1);
  const at::Tensor x = at::randint(0, 20, {32, 5}, at::kLong);
  at::Tensor y = at::randint(0, 20, {32, 5}, at::kLong);
  y[3][2] = -100;
  save_xy(dir.file("train.pt"), x, y);
  save_xy(dir.file("test.pt"), x.slice(0, 0, 8), y.slice(0, 0, 8));
  const Json data{{"name", "tensors"}, {"train", dir.file("train.pt")}, {"test", dir.file("test.pt")}, {"batch_size", 8}};
  Trainer trainer(gpt_on(data));
  EXPECT_TRUE(trainer.data().train.inputs().equal(x));
  EXPECT_TRUE(trainer.data().train.targets().equal(y));
  EXPECT_EQ(trainer.data().info.num_classes, std::max(x.max().item<int64_t>(), y.max().item<int64_t>()) + 1);
  const EvalResult result = trainer.evaluate();
  // By hand: the mean cross-entropy over the 8 test windows' tokens but y[3][2], and their argmax hits.
  {
    at::NoGradGuard no_grad;
    trainer.model().eval();
    const at::Tensor output = trainer.model().forward(x.slice(0, 0, 8));
    const at::Tensor logits = output.reshape({-1, output.size(-1)});
    const at::Tensor targets = y.slice(0, 0, 8).reshape({-1});
    const at::Tensor counted = targets.ne(-100);
    const at::Tensor safe = targets.clamp_min(0);
    const at::Tensor nll = -logits.log_softmax(-1).gather(1, safe.unsqueeze(1)).squeeze(1);
    const double expected_loss = nll.masked_select(counted).mean().item<double>();
    const double expected_accuracy = logits.argmax(-1).eq(safe).logical_and(counted).sum().item<double>() / 39.0;
    trainer.model().train();
    EXPECT_EQ(counted.sum().item<int64_t>(), 39);
    EXPECT_NEAR(result.loss, expected_loss, 1e-6);
    EXPECT_NEAR(result.accuracy, expected_accuracy, 1e-12);
  }
  EXPECT_NEAR(result.perplexity, std::exp(result.loss), 1e-9 * result.perplexity);
  Json smoothed = gpt_on(data);
  smoothed["loss"] = {{"name", "cross_entropy"}, {"label_smoothing", 0.1}};
  EXPECT_TRUE(std::isnan(Trainer(smoothed).evaluate().perplexity)) << "a smoothed loss is no perplexity";

  // Targets that are neither ids nor the loss's ignore_index, a class loss on tokens, an MLP on ids, label noise.
  y[5][1] = -7;
  save_xy(dir.file("wrong.pt"), x, y);
  Json wrong = data;
  wrong["train"] = dir.file("wrong.pt");
  expect_trainer_refuses(gpt_on(wrong), {"'data'", "sample 5, token 1 is -7", "ignore_index (-100)"});
  Json mse = gpt_on(data);
  mse["loss"] = "mse";
  expect_trainer_refuses(mse, {"'loss'", "mse", "token"});
  Json mlp = gpt_on(data);
  mlp["model"] = {{"name", "mlp"}};
  expect_trainer_refuses(mlp, {"'model'", "read as token ids", "embedding", "X.float()"});
  Json noisy = gpt_on(data);
  noisy["data"]["label_noise"] = 0.1;
  expect_trainer_refuses(noisy, {"data.label_noise", "token"});
  for (const char* loss_side : {"saf", "mesa"}) {
    Json trajectory = gpt_on(data);
    trajectory["algorithms"] = {{loss_side, Json::object()}};
    expect_trainer_refuses(trajectory, {std::string("algorithms.") + loss_side, "token sequences"});
  }
  Json long_windows = gpt_on(data);
  long_windows["model"]["block_size"] = 3;
  expect_trainer_refuses(long_windows, {"model.block_size"});
}

// basin-train on token files: a gpt's step records carry perplexity =
// exp(loss) and next-token accuracy; the epoch's, train and test
// perplexity; summary.json the test perplexity; the same config and seed
// give the same numbers.
TEST(TokenDataTest, AGptTrainsOnTokenFilesAndReportsPerplexityAndAccuracy) {
  test::TempDir dir;
  std::vector<int64_t> ids;
  for (int i = 0; i < 3000; ++i) ids.push_back((i % 7 == 0) ? 300 + (i % 3) : (i * 5) % 17);  // learnable
  write_raw(dir.file("train.bin"), ids, 2);
  Json config = gpt_on({{"name", "tokens"}, {"train", dir.file("train.bin")}, {"block_size", 16},
                        {"vocab_size", 320}, {"batch_size", 16}});
  config["max_epochs"] = 6;
  config["optimizer"] = {{"name", "adamw"}, {"lr", 0.01}};
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  test::write_text(dir.file("config.json"), config.dump());
  std::vector<Json> summaries;
  for (const std::string run : {"a", "b"}) {
    const auto result = test::run_command(std::string(BASIN_TRAIN_EXE) + " --config " + dir.file("config.json") +
                                          " --run-dir " + dir.file(run));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    summaries.push_back(Json::parse(test::read_text(dir.file(run + "/summary.json"))));
  }
  EXPECT_EQ(summaries[0]["test_loss"], summaries[1]["test_loss"]) << "same config and seed, same numbers";
  EXPECT_NEAR(summaries[0]["test_perplexity"].get<double>(), std::exp(summaries[0]["test_loss"].get<double>()), 1e-6);
  EXPECT_LT(summaries[0]["test_loss"].get<double>(), std::log(320.0) - 2) << "it learned something";
  std::ifstream records(dir.file("a/metrics.jsonl"));
  int steps = 0, epochs = 0;
  Json last_epoch;
  for (std::string line; std::getline(records, line);) {
    const Json record = Json::parse(line);
    if (record.contains("loss")) {
      ++steps;
      EXPECT_NEAR(record["perplexity"].get<double>(), std::exp(record["loss"].get<double>()), 1e-6 * record["perplexity"].get<double>());
      EXPECT_GE(record["accuracy"].get<double>(), 0.0);
      EXPECT_LE(record["accuracy"].get<double>(), 1.0);
      EXPECT_GT(record["tokens_per_second"].get<double>(), 0.0);
    }
    if (record.contains("train_loss")) {
      ++epochs;
      last_epoch = record;
      EXPECT_NEAR(record["test_perplexity"].get<double>(), std::exp(record["test_loss"].get<double>()), 1e-6 * record["test_perplexity"].get<double>());
      EXPECT_NEAR(record["train_perplexity"].get<double>(), std::exp(record["train_loss"].get<double>()), 1e-6 * record["train_perplexity"].get<double>());
    }
  }
  EXPECT_GT(steps, 0);
  ASSERT_EQ(epochs, 6);
  EXPECT_EQ(last_epoch["test_perplexity"], summaries[0]["test_perplexity"]);
  EXPECT_GT(last_epoch["test_accuracy"].get<double>(), 0.4) << "the next token is mostly the current one plus 5 mod 17";
}

}  // namespace
}  // namespace basin
