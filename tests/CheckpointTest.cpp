// Checkpoint and resume (invariant 7): a run resumed from a checkpoint of
// step k ends bit for bit where the uninterrupted run ends. Every comparison
// is of whole checkpoints (weights, buffers, optimizer state, schedulers,
// algorithms, grad scaler, loop position, metrics accumulators), pickled.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <iterator>

#include <unistd.h>

#include <torch/csrc/jit/serialization/pickle.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/engine/engine.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/datasets/image_codec.h"
#include "distributed_util.h"
#include "python_models.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

std::vector<char> pickled(const StateDict& dict) { return torch::jit::pickle_save(dict); }

/// Captures the whole run at one point of the loop (a batch's end at `step`,
/// or the end of epoch `epoch`), pickled at once as a file would hold it.
class CaptureAt : public Callback {
 public:
  CaptureAt(int64_t step, int64_t epoch) : step_(step), epoch_(epoch) {}
  std::string name() const override { return "capture_at"; }
  void attach(Engine& engine) override { engine_ = &engine; }
  bool on_batch_end(const State& state, Logger&) override {
    if (state.timestamp.step == step_) bytes = pickled(capture_checkpoint(*engine_));
    return false;
  }
  bool on_epoch_end(const State& state, Logger&) override {
    if (state.timestamp.epoch == epoch_) bytes = pickled(capture_checkpoint(*engine_));
    return false;
  }
  std::vector<char> bytes;

 private:
  int64_t step_, epoch_;
  Engine* engine_ = nullptr;
};

struct Outcome {
  std::vector<char> final_state;  // the whole run, pickled, after fit()
  std::vector<float> losses;      // every step's loss, in order
  test::Weights weights;          // the parameters at the end
  FitSummary summary;
};

Outcome finish(Trainer& trainer, const std::shared_ptr<test::LossRecorder>& losses) {
  Outcome outcome;
  outcome.summary = trainer.fit();
  outcome.final_state = pickled(capture_checkpoint(trainer.engine()));
  outcome.losses = losses->losses;
  outcome.weights = trainer.whole_parameters();
  return outcome;
}

/// Resumes `config` from the checkpoint file at `path` in a fresh trainer,
/// runs it to the end, and checks that it ends as `uninterrupted` did: bit
/// for bit, or (`tolerance` > 0) its losses and weights within it.
void expect_resumed_run_ends_as(const Json& config, const std::string& path, const Outcome& uninterrupted,
                                double tolerance = 0) {
  auto resumed_losses = std::make_shared<test::LossRecorder>();
  Trainer resumed(config, {resumed_losses});
  resumed.resume(read_checkpoint_file(path));
  const int64_t resumed_at = resumed.state().timestamp.step;
  const Outcome continued = finish(resumed, resumed_losses);

  ASSERT_EQ(resumed_at + static_cast<int64_t>(continued.losses.size()),
            static_cast<int64_t>(uninterrupted.losses.size()));
  for (std::size_t i = 0; i < continued.losses.size(); ++i) {
    EXPECT_NEAR(continued.losses[i], uninterrupted.losses[static_cast<std::size_t>(resumed_at) + i], tolerance)
        << "step " << i;
  }
  EXPECT_EQ(continued.summary.steps, uninterrupted.summary.steps);
  if (tolerance > 0) {
    EXPECT_LE(test::max_difference(continued.weights, uninterrupted.weights), tolerance) << "the resumed run ended elsewhere";
    return;
  }
  EXPECT_TRUE(continued.final_state == uninterrupted.final_state) << "the resumed run ended elsewhere";
  EXPECT_EQ(continued.summary.test_accuracy, uninterrupted.summary.test_accuracy);
  EXPECT_EQ(continued.summary.final_train_loss, uninterrupted.summary.final_train_loss);
  EXPECT_EQ(continued.summary.skipped_steps, uninterrupted.summary.skipped_steps);
}

/// Runs `config` uninterrupted while capturing a checkpoint at (step, or end
/// of epoch); writes it to a file, reads it back into a fresh trainer,
/// resumes and checks that both runs end identically; `between` runs before the resume.
void expect_resume_matches(const Json& config, int64_t step, int64_t epoch = -1,
                           const std::function<void()>& between = nullptr) {
  test::TempDir dir;
  auto capture = std::make_shared<CaptureAt>(step, epoch);
  auto losses = std::make_shared<test::LossRecorder>();
  Trainer whole(config, {capture, losses});
  const Outcome uninterrupted = finish(whole, losses);
  ASSERT_FALSE(capture->bytes.empty()) << "the run never reached the capture point";
  const std::string path = dir.file(checkpoint_file_name(step));
  write_checkpoint_file(path, torch::jit::pickle_load(capture->bytes).toGenericDict());
  if (between) between();
  expect_resumed_run_ends_as(config, path, uninterrupted);
}

// A checkpoint is streamed to its file, never held whole in memory (a
// 441 MB one put 400 MiB on rank 0's peak), and its bytes are still
// torch::pickle_save's: type tags, storage order, alignment and all.
TEST(CheckpointTest, AStreamedCheckpointFileHoldsPickleSavesBytes) {
  test::TempDir dir;
  StateDict checkpoint = new_state_dict();
  StateDict nested = new_state_dict();
  nested.insert("moments", c10::List<at::Tensor>({at::randn({3, 5}), at::arange(7, at::kLong)}));
  nested.insert("step", int64_t{12});
  checkpoint.insert("optimizer", nested);
  checkpoint.insert("weights", at::randn({64, 33}));
  checkpoint.insert("half", at::randn({9}).to(at::kBFloat16));
  checkpoint.insert("view", at::randn({10, 10}).slice(0, 2, 5));  // a storage larger than its tensor
  checkpoint.insert("config", std::string("{\"seed\": 0}"));
  const std::string path = dir.file("step-000000000012.pt");
  write_checkpoint_file(path, checkpoint);
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(written == pickled(checkpoint)) << written.size() << " bytes against " << pickled(checkpoint).size();
  const StateDict back = read_checkpoint_file(path);  // its checksum file agrees (or this throws)
  EXPECT_TRUE(back.at("weights").toTensor().equal(checkpoint.at("weights").toTensor()));
  EXPECT_TRUE(back.at("view").toTensor().equal(checkpoint.at("view").toTensor()));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(CheckpointTest, ResumedSgdEqualsTheUninterruptedRunMidEpoch) {
  expect_resume_matches(test::smoke_config(), 5);  // 8 steps per epoch: inside the first
}

TEST(CheckpointTest, ResumedSgdEqualsTheUninterruptedRunAtAnEpochEnd) {
  Json config = test::smoke_config();
  config["schedulers"] = Json::parse(R"([{"name": "step", "step_size": 1, "gamma": 0.5, "interval": "epoch"}])");
  config["max_epochs"] = 3;
  expect_resume_matches(config, 8, /*epoch=*/0);
}

TEST(CheckpointTest, ResumedSamWithAdamWarmupMicrobatchesBatchNormAndIntervalEqualsTheUninterruptedRun) {
  Json config = test::smoke_config();
  config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  config["schedulers"] = Json::parse(R"([{"name": "cosine_warmup", "warmup": 3}])");
  config["data"]["microbatches"] = 2;
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05, "interval": 2}})");
  expect_resume_matches(config, 5);  // odd: the interval's phase must survive
}

// A language model resumes exactly too: a gpt with dropout (the generators
// travel), under bf16 autocast, in microbatches, with SAM, on byte windows.
TEST(CheckpointTest, ResumedGptWithDropoutBf16MicrobatchesAndSamEqualsTheUninterruptedRun) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "Q: Why resume? A: To end where the run would have, " + std::to_string(i) + ".\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  Json config = Json::parse(R"({"seed": 6, "threads": 1, "max_steps": 6, "precision": "amp_bf16",
    "model": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16, "dropout": 0.1},
    "optimizer": {"name": "adamw", "lr": 0.01},
    "algorithms": {"sam": {"rho": 0.05}}})");
  config["data"] = {{"name", "text"}, {"train", dir.file("corpus.txt")}, {"block_size", 16}, {"batch_size", 8},
                    {"microbatches", 2}};
  expect_resume_matches(config, 3);
}

// The llama too, on text through the fortunes example's tokenizer, with
// attention dropout, under bf16 autocast, in microbatches, with SAM.
TEST(CheckpointTest, ResumedLlamaOnTokenizedTextWithDropoutBf16AndSamEqualsTheUninterruptedRun) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 60; ++i) corpus += "Q: Why resume a llama? A: To end where it would have, " + std::to_string(i) + ".\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  Json config = Json::parse(R"({"seed": 6, "threads": 1, "max_steps": 6, "precision": "amp_bf16",
    "model": {"name": "llama", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "attention_dropout": 0.1},
    "optimizer": {"name": "adamw", "lr": 0.01},
    "algorithms": {"sam": {"rho": 0.05}}})");
  config["data"] = {{"name", "text"}, {"train", dir.file("corpus.txt")}, {"block_size", 16}, {"batch_size", 8},
                    {"microbatches", 2}, {"tokenizer", std::string(BASIN_SOURCE_DIR) + "/examples/tokenizers/fortunes_bpe.json"}};
  expect_resume_matches(config, 3);
}

// Low-rank adapters resume exactly too: a gpt whose adapters have dropout,
// under bf16 in microbatches with SAM. The checkpoint holds the frozen base
// as well: the resume ends where the run would have though the init_from
// file holds other weights by then.
TEST(CheckpointTest, ResumedLoraRunEqualsTheUninterruptedRunWhateverItsBaseFileHoldsThen) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "Q: Why resume an adapter? A: To end where it would have, " + std::to_string(i) + ".\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  Json config = Json::parse(R"json({"seed": 6, "threads": 1, "max_steps": 6, "precision": "amp_bf16",
    "model": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16, "dropout": 0.1},
    "optimizer": {"name": "adamw", "lr": 0.01},
    "algorithms": {"sam": {"rho": 0.05}}})json");
  config["data"] = {{"name", "text"}, {"train", dir.file("corpus.txt")}, {"block_size", 16}, {"batch_size", 8},
                    {"microbatches", 2}};
  auto export_base = [&](int64_t seed) {
    Json plain = config;
    plain["seed"] = seed;
    Trainer trainer(plain);
    std::filesystem::create_directories(dir.file("base"));
    trainer.export_model(dir.file("base"));
  };
  export_base(6);
  config["init_from"] = dir.file("base/state_dict.pt");
  config["adapters"] = Json::parse(R"json({"lora": {"r": 4, "alpha": 8, "dropout": 0.1,
                                   "targets": "h\\.\\d+\\.(attn\\.c_attn|mlp\\.c_proj)"}})json");
  expect_resume_matches(config, 3, -1, [&] { export_base(7); });
  // Flat-LoRA's noise, drawn from (seed, step, layer, row), is drawn again as the uninterrupted run drew it.
  config["algorithms"] = Json::parse(R"({"flat_lora": {"rho": 0.3}})");
  expect_resume_matches(config, 3, -1, [&] { export_base(8); });
  // Bi-LoRA's auxiliary adapters travel in its state.
  config["algorithms"] = Json::parse(R"({"bi_lora": {"rho": 0.3, "ascent_lr": 0.5}})");
  expect_resume_matches(config, 3, -1, [&] { export_base(9); });
}

// Every SAM-family algorithm resumes exactly: its moving averages (friendly_sam,
// vasso) travel in the algorithm's state, the rest in the optimizer's.
class VariantResumeTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(VariantResumeTest, ResumedRunEqualsTheUninterruptedRun) {
  Json config = test::smoke_config();
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  config["algorithms"] = Json::object();
  config["algorithms"][GetParam().first] = Json::parse(GetParam().second);
  expect_resume_matches(config, 5);
  // With plain steps between SAM steps, resumed at an odd step: the phase and the averages hold.
  config["algorithms"][GetParam().first]["interval"] = 2;
  expect_resume_matches(config, 5);
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantResumeTest,
                         ::testing::ValuesIn(test::sam_family()),
                         [](const auto& info) { return info.param.first; });

// SAF's bank of past outputs and MESA's weight average travel in the
// algorithm's state: resumed in the epoch before the term first reads them.
class LossSideResumeTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(LossSideResumeTest, ResumedRunEqualsTheUninterruptedRun) {
  Json config = test::smoke_config();
  config["max_epochs"] = 3;
  config["algorithms"] = Json::object();
  config["algorithms"][GetParam().first] = Json::parse(GetParam().second);
  expect_resume_matches(config, 13);  // 8 steps an epoch: inside epoch 1
}

INSTANTIATE_TEST_SUITE_P(LossSide, LossSideResumeTest, ::testing::ValuesIn(test::loss_side_family()),
                         [](const auto& info) { return info.param.first; });

// Checkpoints that main wrote at 7cdec9a, before the SAM family became rules
// on one step (tests/fixtures/checkpoints-7cdec9a/README.md): each still
// resumes, and ends where today's uninterrupted run of its config ends.
class WrittenBeforeTheRulesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WrittenBeforeTheRulesTest, ResumesAndEndsWhereTodaysUninterruptedRunEnds) {
  const std::string name = GetParam();
  Json config = test::smoke_config();
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  config["algorithms"] = Json::object();
  const auto family = test::sam_family();
  const auto keys = std::find_if(family.begin(), family.end(), [&name](const auto& v) { return v.first == name; });
  config["algorithms"][name] = Json::parse(name == "sam" ? R"({"rho": 0.05})" : keys->second);
  config["algorithms"][name]["interval"] = 2;  // the fixture stopped at step 5: the interval's phase too
  auto losses = std::make_shared<test::LossRecorder>();
  auto at_five = std::make_shared<CaptureAt>(5, -1);  // where the fixture was captured
  Trainer whole(config, {losses, at_five});
  const Outcome uninterrupted = finish(whole, losses);
  // Floats differ between LibTorch versions: each build resumes the files its version wrote.
  const std::string version = compat::torch_version();
  std::string folder;
  if (version.rfind("1.13", 0) == 0) folder = "libtorch-1.13";
  if (version.rfind("2.11", 0) == 0) folder = "libtorch-2.11";
  if (folder.empty()) {
    GTEST_SKIP() << "no checkpoint of 7cdec9a written by LibTorch " << version << " (1.13 and 2.11 only)";
  }
  const std::string path =
      std::string(BASIN_SOURCE_DIR) + "/tests/fixtures/checkpoints-7cdec9a/" + folder + "/" + name + ".basin";
  ASSERT_TRUE(fs::exists(path)) << path;
  // The same LibTorch computes other last bits on another CPU (PyPI's wheel
  // picks its kernels by the machine): bit for bit only where today's run
  // reaches the fixture's step-5 weights exactly; elsewhere the old file
  // still resumes, to float noise.
  const StateDict fixture = read_checkpoint_file(path).at("model").toGenericDict();
  const StateDict today = torch::jit::pickle_load(at_five->bytes).toGenericDict().at("model").toGenericDict();
  double apart = 0;
  for (const auto& entry : today) {
    ASSERT_TRUE(fixture.contains(entry.key())) << entry.key().toStringRef();
    const at::Tensor a = entry.value().toTensor(), b = fixture.at(entry.key()).toTensor();
    ASSERT_EQ(a.sizes(), b.sizes()) << entry.key().toStringRef();
    apart = std::max(apart, (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>());
  }
  if (apart > 0) {
    std::cout << "note: this machine's step-5 weights differ from the fixture's by " << apart
              << " (its CPU's kernels): checking the resume to float noise, not bit for bit" << std::endl;
  }
  EXPECT_LE(apart, 1e-5) << "the fixture's step 5 is not this run's step 5";
  expect_resumed_run_ends_as(config, path, uninterrupted, apart == 0 ? 0.0 : 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Variants, WrittenBeforeTheRulesTest,
                         ::testing::Values("sam", "asam", "gsam", "wsam", "friendly_sam", "fisher_sam", "vasso", "msam",
                                           "looksam", "ae_sam", "momentum_sam", "esam"),
                         [](const auto& info) { return info.param; });

TEST(CheckpointTest, MovingAveragesAreInTheCheckpointByParameterIndex) {
  Json config = test::smoke_config();
  config["max_steps"] = 3;
  config["algorithms"] = Json::parse(R"({"vasso": {}})");
  Trainer trainer(config);
  trainer.fit();
  const StateDict checkpoint = capture_checkpoint(trainer.engine());
  const auto averages = checkpoint.at("algorithms").toGenericDict().at("vasso").toGenericDict().at("parameters").toGenericDict();
  const std::vector<at::Tensor> params = ParameterNumbering(*trainer.state().optimizer).parameters();  // PyTorch's numbering
  ASSERT_EQ(averages.size(), params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const at::Tensor saved = averages.at(static_cast<int64_t>(i)).toGenericDict().at("gradient_average").toTensor();
    EXPECT_EQ(saved.sizes(), params[i].sizes()) << i;
  }
}

TEST(CheckpointTest, ResumedRunAfterASkippedScalerStepEqualsTheUninterruptedRun) {
  // A real fp32 overflow (as in MixedPrecisionTest): the largest scale a float
  // holds, 2^127, and inputs large enough that scaled gradients exceed it.
  Json config = test::smoke_config();
  config["data"]["input_scale"] = 30;
  config["optimizer"]["lr"] = 0.001;
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 1.7014118346046923e+38, "growth_interval": 3}})");
  Trainer trainer(config);
  const FitSummary summary = trainer.fit();
  ASSERT_GT(summary.skipped_steps, 0) << "no step overflowed; the test would not test the skip";
  expect_resume_matches(config, 1);
}

TEST(CheckpointTest, ResumedBf16RunEqualsTheUninterruptedRun) {
  Json config = test::smoke_config();
  config["precision"] = "amp_bf16";
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  expect_resume_matches(config, 6);
}

// Two ranks as threads: rank 0 writes, every rank reads the file back.
void expect_distributed_resume_matches(const Json& config, int64_t step) {
  test::TempDir dir;
  const std::string path = dir.file(checkpoint_file_name(step));
  std::vector<char> uninterrupted, continued;
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    auto capture = std::make_shared<CaptureAt>(step, -1);
    Trainer whole(config, {capture}, {}, communicator);
    whole.fit();
    const auto final_state = pickled(capture_checkpoint(whole.engine()));  // collective
    if (rank == 0) {
      uninterrupted = final_state;
      write_checkpoint_file(path, torch::jit::pickle_load(capture->bytes).toGenericDict());
    }
    communicator->barrier();
    Trainer resumed(config, {}, {}, communicator);
    resumed.resume(read_checkpoint_file(path));
    resumed.fit();
    const auto resumed_state = pickled(capture_checkpoint(resumed.engine()));
    if (rank == 0) continued = resumed_state;
  });
  ASSERT_FALSE(uninterrupted.empty());
  EXPECT_TRUE(continued == uninterrupted) << "the resumed run ended elsewhere";
}

TEST(CheckpointTest, ResumedDataParallelRunEqualsTheUninterruptedRun) {
  Json config = test::smoke_config();
  config["parallel"] = Json::parse(R"({"mode": "ddp", "timeout_seconds": 60})");
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  expect_distributed_resume_matches(config, 3);  // 4 steps per epoch on two ranks
}

TEST(CheckpointTest, ResumedZeroOneRunEqualsTheUninterruptedRun) {
  Json config = test::smoke_config();
  config["parallel"] = Json::parse(R"({"mode": "zero1", "timeout_seconds": 60})");
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  expect_distributed_resume_matches(config, 3);
}

// A module scripted in Python resumes as basin's own models do (its tensors
// are the model's): one process with Adam and SAM, and two ranks under zero2.
TEST(CheckpointTest, ResumedTorchScriptRunEqualsTheUninterruptedRun) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  Json config = test::python_model_config(dir, "net.pt");
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  config["max_epochs"] = 2;
  expect_resume_matches(config, 5);  // 8 steps an epoch
  config["parallel"] = Json::parse(R"({"mode": "zero2", "timeout_seconds": 60})");
  expect_distributed_resume_matches(config, 3);  // 4 steps an epoch on two ranks
}

// A folder of images resumes as any dataset does: the resumed epoch sees the same batches.
TEST(CheckpointTest, ResumedImageFolderRunEqualsTheUninterruptedRun) {
  test::TempDir dir;
  for (int i = 0; i < 72; ++i) {
    Image image{5, 5, 1, {}};
    for (int p = 0; p < 25; ++p) image.pixels.push_back(static_cast<uint8_t>((37 * i + 11 * p + (i % 3) * 80) % 256));
    const fs::path path = dir.path() / (i < 56 ? "train" : "test") / ("c" + std::to_string(i % 3)) / (std::to_string(i) + ".png");
    fs::create_directories(path.parent_path());
    const auto bytes = encode_png(image);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  Json config = test::smoke_config();
  config["data"] = {{"name", "image_folder"}, {"train", dir.file("train")}, {"test", dir.file("test")}, {"channels", 1},
                    {"size", 4}, {"batch_size", 8}};
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  expect_resume_matches(config, 5);  // 7 steps an epoch: mid-epoch
}

// The rules that keep per-parameter state resume under zero2 too: LookSAM's
// g_v (whole on every rank), Friendly SAM's and VaSSO's gradient averages
// (on their owners, gathered into the checkpoint).
TEST(CheckpointTest, ResumedZeroTwoRunEqualsTheUninterruptedRun) {
  for (const char* algorithm : {R"({"looksam": {"rho": 0.05, "k": 2}})", R"({"friendly_sam": {"rho": 0.05}})",
                                R"({"vasso": {"rho": 0.05}})"}) {
    Json config = test::smoke_config();
    config["parallel"] = Json::parse(R"({"mode": "zero2", "timeout_seconds": 60})");
    config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
    config["algorithms"] = Json::parse(algorithm);
    SCOPED_TRACE(algorithm);
    expect_distributed_resume_matches(config, 3);
  }
}

// ARWP's running squares live on the owners of the synced gradients (under
// zero1 too, where the parameters are whole on every rank): the checkpoint
// gathers every owner's.
TEST(CheckpointTest, ResumedArwpRunUnderZeroOneAndTwoEqualsTheUninterruptedRun) {
  for (const char* mode : {"zero1", "zero2"}) {
    Json config = test::smoke_config();
    config["parallel"] = {{"mode", mode}, {"timeout_seconds", 60}};
    config["algorithms"] = Json::parse(R"({"arwp": {"gamma": 0.05, "eta": 10}})");
    SCOPED_TRACE(mode);
    expect_distributed_resume_matches(config, 3);
  }
}

TEST(CheckpointTest, ZeroOneCheckpointHoldsEveryShardsOptimizerState) {
  Json config = test::smoke_config();
  config["max_steps"] = 2;
  config["parallel"] = Json::parse(R"({"mode": "zero1", "timeout_seconds": 60})");
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  Json single = config;  // one process with both ranks' batches
  single.erase("parallel");
  single["data"]["batch_size"] = 32;
  Trainer reference(single);
  reference.fit();
  const StateDict expected = optimizer_state_dict(*reference.state().optimizer);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    trainer.fit();
    const StateDict saved = capture_checkpoint(trainer.engine());
    if (rank != 0) return;
    const auto states = saved.at("optimizer").toGenericDict().at("state").toGenericDict();
    const auto reference_states = expected.at("state").toGenericDict();
    ASSERT_EQ(states.size(), reference_states.size());  // every parameter, whichever rank owns it
    for (const auto& entry : reference_states) {
      const auto mine = states.at(entry.key()).toGenericDict();
      const auto theirs = entry.value().toGenericDict();
      EXPECT_EQ(mine.at("step").toInt(), theirs.at("step").toInt());
      // Two ranks of half batches average to the same gradient up to rounding.
      EXPECT_TRUE(at::allclose(mine.at("exp_avg").toTensor(), theirs.at("exp_avg").toTensor(), 1e-5, 1e-7));
    }
  });
}

TEST(CheckpointTest, ConfigThatWouldMakeADifferentRunIsRefusedNamingTheKey) {
  test::TempDir dir;
  Json config = test::smoke_config();
  config["max_steps"] = 3;
  Trainer first(config);
  first.fit();
  const StateDict checkpoint = capture_checkpoint(first.engine());
  Json changed = config;
  changed["optimizer"]["lr"] = 0.2;
  Trainer second(changed);
  const std::string message = test::config_error_of([&] { second.resume(checkpoint); });
  EXPECT_NE(message.find("'optimizer.lr'"), std::string::npos) << message;
  EXPECT_NE(message.find("--allow-config-change"), std::string::npos) << message;
  // Length, logging and activation checkpointing may change; an explicit override accepts the rest.
  Json longer = config;
  longer["max_steps"] = 6;
  longer["log_every"] = 2;
  longer["parallel"]["activation_checkpointing"] = true;
  Trainer third(longer);
  EXPECT_NO_THROW(third.resume(checkpoint));
  Trainer fourth(changed);
  EXPECT_NO_THROW(fourth.resume(checkpoint, ResumeOptions{/*allow_config_change=*/true}));
  EXPECT_EQ(fourth.state().timestamp.step, 3);
}

TEST(CheckpointTest, TruncatedAndBitFlippedFilesAreRejectedNamingTheFile) {
  test::TempDir dir;
  Trainer trainer(test::smoke_config());
  const StateDict checkpoint = capture_checkpoint(trainer.engine());
  const std::string path = dir.file(checkpoint_file_name(7));
  write_checkpoint_file(path, checkpoint);
  EXPECT_NO_THROW(read_checkpoint_file(path));
  const std::string original = test::read_text(path);

  auto error_of = [&](const std::string& contents) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
    try {
      read_checkpoint_file(path);
    } catch (const CheckpointError& error) {
      return std::string(error.what());
    }
    return std::string("(no error)");
  };
  const std::string truncated = error_of(original.substr(0, original.size() / 2));
  EXPECT_NE(truncated.find(path), std::string::npos) << truncated;
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;
  std::string flipped = original;
  flipped[flipped.size() / 3] ^= 0x10;
  const std::string corrupted = error_of(flipped);
  EXPECT_NE(corrupted.find(path), std::string::npos) << corrupted;
  EXPECT_NE(corrupted.find("corrupted"), std::string::npos) << corrupted;
  fs::remove(path + ".sum");
  const std::string unfinished = error_of(original);
  EXPECT_NE(unfinished.find("checksum file"), std::string::npos) << unfinished;
}

TEST(CheckpointTest, LatestFallsBackPastDamagedCheckpointsAndRotationKeepsTheNewest) {
  test::TempDir dir;
  Trainer trainer(test::smoke_config());
  StateDict checkpoint = capture_checkpoint(trainer.engine());
  const std::string folder = dir.file("checkpoints");
  for (int64_t step : {2, 4, 6, 8}) write_checkpoint_file((fs::path(folder) / checkpoint_file_name(step)).string(), checkpoint);
  remove_old_checkpoints(folder, 3);
  const auto kept = list_checkpoint_files(folder);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_NE(kept.front().find(checkpoint_file_name(8)), std::string::npos);
  EXPECT_FALSE(fs::exists(fs::path(folder) / checkpoint_file_name(2)));

  const std::string newest = kept.front();
  std::ofstream(newest, std::ios::binary | std::ios::app) << "garbage";
  const LatestCheckpoint latest = read_latest_checkpoint(folder);
  EXPECT_NE(latest.path.find(checkpoint_file_name(6)), std::string::npos) << latest.path;
  ASSERT_EQ(latest.rejected.size(), 1u);
  EXPECT_NE(latest.rejected.front().find(newest), std::string::npos);
}

TEST(CheckpointTest, UnwritableFolderFailsClearlyAndKeepsTheEarlierCheckpoint) {
  test::TempDir dir;
  Trainer trainer(test::smoke_config());
  const StateDict checkpoint = capture_checkpoint(trainer.engine());
  const std::string folder = dir.file("checkpoints");
  const std::string earlier = (fs::path(folder) / checkpoint_file_name(1)).string();
  write_checkpoint_file(earlier, checkpoint);
  fs::permissions(folder, fs::perms::owner_read | fs::perms::owner_exec);
  // Root ignores permissions: then a folder below a plain file stands for an unwritable place.
  const bool permissions_hold = ::access(folder.c_str(), W_OK) != 0;
  const std::string target = permissions_hold ? (fs::path(folder) / checkpoint_file_name(2)).string()
                                              : (fs::path(earlier) / checkpoint_file_name(2)).string();
  try {
    write_checkpoint_file(target, checkpoint);
    ADD_FAILURE() << "writing to an unwritable place succeeded";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find(target), std::string::npos) << error.what();
  }
  fs::permissions(folder, fs::perms::owner_all);
  EXPECT_NO_THROW(read_checkpoint_file(earlier));
  EXPECT_EQ(list_checkpoint_files(folder).size(), 1u);
}

TEST(CheckpointTest, NonFiniteLossSkipsTheStepAndStopsAfterTheConfiguredStreak) {
  Json config = test::smoke_config();
  config["nonfinite_loss"] = Json::parse(R"({"max_consecutive": 3})");
  Trainer trainer(config);
  // Weights of NaN give a NaN loss at every step.
  {
    at::NoGradGuard no_grad;
    trainer.model().parameters().back().fill_(NAN);
  }
  const auto first = trainer.model().parameters().front().clone();
  try {
    trainer.fit();
    ADD_FAILURE() << "training went on with a NaN loss";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("3 consecutive steps"), std::string::npos) << error.what();
  }
  EXPECT_EQ(trainer.state().skipped_steps, 3);
  EXPECT_TRUE(at::equal(trainer.model().parameters().front(), first)) << "a skipped step changed the weights";
}

}  // namespace
}  // namespace basin
