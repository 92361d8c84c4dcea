// "data": {"name": "tensors"}: splits saved with torch.save({"x": X, "y": Y}),
// from Python (when Debian's python3-torch is there) and from LibTorch, and
// every file that does not fit refused naming the key, the file and why.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/data/dataset.h"
#include "basin/core/train/trainer.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

void save(const std::string& path, const at::Tensor& x, const at::Tensor& y) {
  c10::Dict<std::string, at::Tensor> dict;
  if (x.defined()) dict.insert("x", x);
  if (y.defined()) dict.insert("y", y);
  const std::vector<char> bytes = torch::jit::pickle_save(dict);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

c10::impl::GenericDict load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return torch::jit::pickle_load(std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()))
      .toGenericDict();
}

DataSplits read(const std::string& train, const std::string& test, Json extra = Json::object()) {
  Json data = {{"train", train}, {"test", test}};
  data.update(extra);
  Params params(data, "data");
  return std::move(*dataset_registry().create("tensors", params, 0));
}

/// A learnable task: 3 classes by a fixed linear teacher, samples 1x4x4.
void save_task(const std::string& path, int64_t n, uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor x = at::randn({n, 1, 4, 4});
  const at::Tensor teacher = at::arange(48, at::kFloat).reshape({16, 3}).sin();
  save(path, x, x.reshape({n, 16}).matmul(teacher).argmax(1));
}

// Python's own files (float64 inputs and int32 labels, converted): the
// splits hold Python's values, and SAM learns the task from them.
TEST(TensorFilesTest, FilesSavedInPythonAreReadAsPythonWroteThemAndSamLearnsFromThem) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  const std::string train = dir.file("train.pt"), test_file = dir.file("test.pt");
  const auto python = test::run_command(
      "/usr/bin/python3 -c \"import sys, torch\n"
      "torch.manual_seed(5); w = torch.randn(16, 3, dtype=torch.float64)\n"
      "for path, n in ((sys.argv[1], 256), (sys.argv[2], 128)):\n"
      "  x = torch.randn(n, 1, 4, 4, dtype=torch.float64)\n"
      "  torch.save({'x': x, 'y': (x.reshape(n, 16) @ w).argmax(1).int()}, path)\" " + train + " " + test_file);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  const DataSplits splits = read(train, test_file);
  const auto written = load(train);
  EXPECT_TRUE(at::equal(splits.train.inputs(), written.at("x").toTensor().to(at::kFloat)));
  EXPECT_TRUE(at::equal(splits.train.targets(), written.at("y").toTensor().to(at::kLong)));
  EXPECT_EQ(splits.train.inputs().scalar_type(), at::kFloat);
  EXPECT_EQ(splits.test.size(), 128);
  EXPECT_EQ(splits.info.input_shape, (std::vector<int64_t>{1, 4, 4}));
  EXPECT_EQ(splits.info.num_classes, written.at("y").toTensor().max().item<int64_t>() + 1);

  Json config = test::smoke_config();
  config["data"] = {{"name", "tensors"}, {"train", train}, {"test", test_file}, {"batch_size", 32}};
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  config["max_epochs"] = 8;
  Trainer trainer(config);
  const FitSummary summary = trainer.fit();
  EXPECT_GT(summary.test_accuracy, 0.6) << "3 classes: chance is 1/3";
}

// Files written by LibTorch, with the pipeline's subset and label noise: two
// runs of one config and seed give the same numbers.
TEST(TensorFilesTest, ARunOnTensorFilesIsDeterministic) {
  test::TempDir dir;
  save_task(dir.file("train.pt"), 128, 1);
  save_task(dir.file("test.pt"), 64, 2);
  Json config = test::smoke_config();
  config["data"] = {{"name", "tensors"}, {"train", dir.file("train.pt")}, {"test", dir.file("test.pt")},
                    {"batch_size", 16}, {"train_subset", 96}, {"label_noise", 0.1}};
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  Trainer first(config), second(config);
  const FitSummary a = first.fit(), b = second.fit();
  EXPECT_EQ(a.final_train_loss, b.final_train_loss);
  EXPECT_EQ(a.test_accuracy, b.test_accuracy);
}

/// The message of the ConfigError `read` throws, or "" when it accepts.
std::string refusal(const std::string& train, const std::string& test, Json extra = Json::object()) {
  try {
    read(train, test, extra);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(TensorFilesTest, FilesThatDoNotFitAreRefusedNamingTheKeyTheFileAndWhy) {
  test::TempDir dir;
  const std::string good = dir.file("good.pt");
  save(good, at::randn({8, 3}), at::arange(8) % 2);
  struct Case {
    std::string name;
    std::function<void(const std::string&)> write;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"lengths.pt", [](const std::string& p) { save(p, at::randn({8, 3}), at::zeros({7}, at::kLong)); },
       "x holds 8 samples and y 7"},
      {"float_labels.pt", [](const std::string& p) { save(p, at::randn({8, 3}), at::zeros({8})); },
       "y is Float; expected integer class labels"},
      {"bool_inputs.pt", [](const std::string& p) { save(p, at::zeros({8, 3}, at::kBool), at::zeros({8}, at::kLong)); },
       "x is Bool; expected floating point inputs"},
      {"negative_ids.pt", [](const std::string& p) { save(p, at::full({8, 3}, -1, at::kLong), at::zeros({8}, at::kLong)); },
       "x holds id -1; expected token ids"},
      {"cube_labels.pt", [](const std::string& p) { save(p, at::randn({8, 3}), at::zeros({8, 3, 2}, at::kLong)); },
       "y has shape [8, 3, 2]; expected [samples] class labels or [samples, tokens]"},
      {"no_y.pt", [](const std::string& p) { save(p, at::randn({8, 3}), at::Tensor()); }, "has no tensor \"y\""},
      {"nan.pt", [](const std::string& p) {
         at::Tensor x = at::randn({8, 3});
         x[2][1] = NAN;
         save(p, x, at::zeros({8}, at::kLong));
       }, "x holds non-finite values (NaN or inf), 1 of them"},
      {"negative.pt", [](const std::string& p) { save(p, at::randn({8, 3}), at::full({8}, -1, at::kLong)); },
       "y holds label -1"},
      {"one_dim.pt", [](const std::string& p) { save(p, at::randn({8}), at::zeros({8}, at::kLong)); },
       "x has shape [8]; expected [samples, ...]"},
      {"text.pt", [](const std::string& p) { test::write_text(p, "not a torch.save file"); },
       "cannot be read as a torch.save file"},
  };
  for (const auto& c : cases) {
    const std::string path = dir.file(c.name);
    c.write(path);
    const std::string message = refusal(path, good);
    EXPECT_NE(message.find("'data.train'"), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(path), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << c.name << ": " << message;
  }
  EXPECT_NE(refusal(good, dir.file("missing.pt")).find("'data.test': cannot read"), std::string::npos);
  const std::string wide = dir.file("wide.pt");
  save(wide, at::randn({8, 4}), at::zeros({8}, at::kLong));
  EXPECT_NE(refusal(good, wide).find("its samples have shape [4], the training samples [3]"), std::string::npos)
      << refusal(good, wide);
  EXPECT_NE(refusal(good, good, {{"num_classes", 1}}).find("data.num_classes"), std::string::npos);
  const std::string many = dir.file("many.pt");
  save(many, at::randn({8, 3}), at::arange(8));
  EXPECT_NE(refusal(good, many, {{"num_classes", 4}}).find("4 classes, but the labels reach 7"), std::string::npos)
      << refusal(good, many, {{"num_classes", 4}});
  EXPECT_EQ(refusal(good, good), "");
}

// basin-train: a data file that does not fit is one line and exit 2.
TEST(TensorFilesTest, BasinTrainRefusesADataFileWhoseXAndYLengthsDifferWithExitTwo) {
  test::TempDir dir;
  save(dir.file("bad.pt"), at::randn({8, 3}), at::zeros({7}, at::kLong));
  Json config = test::smoke_config();
  config["data"] = {{"name", "tensors"}, {"train", dir.file("bad.pt")}, {"test", dir.file("bad.pt")}};
  test::write_text(dir.file("config.json"), config.dump());
  const auto run = test::run_command(std::string(BASIN_TRAIN_EXE) + " --config " + dir.file("config.json") +
                                     " --run-dir " + dir.file("run"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("x holds 8 samples and y 7"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace basin
