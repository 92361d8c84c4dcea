#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "basin/algorithms/sam/sam_family.h"
#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/engine/callback.h"
#include "basin/core/model/model.h"
#include "basin/core/train/trainer.h"

namespace basin::test {

/// Runs `action`, which must throw a ConfigError whose message holds every
/// one of `words` (the key, the file, what was expected); `what` names the
/// case when it does not.
template <typename Action>
void expect_config_error(Action&& action, const std::vector<std::string>& words, const std::string& what) {
  try {
    action();
    ADD_FAILURE() << "accepted " << what;
  } catch (const ConfigError& error) {
    for (const std::string& word : words) {
      EXPECT_NE(std::string(error.what()).find(word), std::string::npos) << "'" << word << "' not in: " << error.what();
    }
  }
}

/// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "basin-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

/// The splits data `name` reads from the data section `data`, every key of it used (Params::finish).
inline DataSplits read_dataset(const std::string& name, const Json& data) {
  Params params(data, "data");
  DataSplits splits = std::move(*dataset_registry().create(name, params, 0));
  params.finish();
  return splits;
}

/// Result of a program run through the shell.
struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

/// Runs `command` with a time limit (coreutils timeout), capturing its output.
/// Debian's python3-torch is there (the Python cross-checks skip, saying so, when not).
inline bool have_python_torch() { return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0; }

inline RunResult run_command(const std::string& command, int timeout_seconds = 120) {
  TempDir dir;
  const std::string out = dir.file("output.txt");
  const std::string full = "timeout " + std::to_string(timeout_seconds) + " " + command + " > '" + out + "' 2>&1";
  const int status = std::system(full.c_str());
  RunResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.output = read_text(out);
  return result;
}

/// The lines of `text`, without their newlines.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// The message of the ConfigError `action` throws, or "(no error)".
inline std::string config_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

/// The ConfigError building a Trainer from `config` gives, or "(no error)".
inline std::string trainer_config_error(const Json& config) {
  return config_error_of([&config] { Trainer trainer(config); });
}

/// Collects the loss of every step, bit for bit.
class LossRecorder : public Callback {
 public:
  std::string name() const override { return "loss_recorder"; }
  bool on_batch_end(const State& state, Logger&) override {
    losses.push_back(state.step_loss.item<float>());
    return false;
  }
  std::vector<float> losses;
};

/// Trains `config` for its steps as one batch and as 4 microbatches per
/// batch; the weights must agree to float tolerance (invariant 4).
inline void expect_microbatches_match_one_batch(Json config) {
  // Counts forward passes, to be sure the microbatches really ran.
  struct ForwardCounter : Callback {
    std::string name() const override { return "forward_counter"; }
    bool on_before_forward(const State&, Logger&) override { return ++count, false; }
    int64_t count = 0;
  };
  auto whole_forwards = std::make_shared<ForwardCounter>();
  auto split_forwards = std::make_shared<ForwardCounter>();
  Trainer whole(config, {whole_forwards});
  config["data"]["microbatches"] = 4;
  Trainer split(config, {split_forwards});
  whole.fit();
  split.fit();
  EXPECT_EQ(split_forwards->count, 4 * whole_forwards->count);
  const auto a = whole.model().parameters();
  const auto b = split.model().parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::allclose(a[i], b[i], 1e-5, 1e-6))
        << "parameter " << i << " max diff " << (a[i] - b[i]).abs().max().item<double>();
  }
}

/// The members of the family that train low-rank adapters alone (LoraTest runs them).
inline bool needs_adapters(const std::string& name) { return name == "flat_lora" || name == "bi_lora"; }

/// Each variant the SAM family registers (plain SAM aside, and those that need adapters), with config
/// keys: some off their defaults (msam's m fits the smoke config's batch
/// twice), the others at them. A variant registered later is in at once.
inline std::vector<std::pair<std::string, std::string>> sam_family() {
  const std::map<std::string, std::string> keys = {
      {"asam", R"({"rho": 0.5})"},       {"gsam", R"({"alpha": 0.3})"},
      {"wsam", R"({"gamma": 0.8})"},     {"friendly_sam", R"({"sigma": 0.9, "lambda": 0.6})"},
      {"fisher_sam", R"({"eta": 2.0})"}, {"vasso", R"({"theta": 0.4})"},
      {"msam", R"({"m": 2})"},          {"looksam", R"({"k": 3})"},
      // gamma 0.75: at the paper's 0.5 ESAM learns slower in the first
      // steps (Fashion-MNIST after 16 steps: 0.47 against SAM's 0.63).
      {"esam", R"({"beta": 0.5, "gamma": 0.75})"}};
  std::vector<std::pair<std::string, std::string>> family;
  for (const auto& name : sam_family_registry().names()) {
    if (name == "sam" || needs_adapters(name)) continue;
    const auto found = keys.find(name);
    family.emplace_back(name, found == keys.end() ? "{}" : found->second);
  }
  return family;
}

/// Trains `config` with the largest grad scale a float holds and inputs
/// large enough that the first steps' scaled gradients overflow (as in
/// MixedPrecisionTest): they are skipped with w untouched, the scale backs
/// off and training goes on.
inline void expect_overflowed_steps_skipped(Json config) {
  config["data"]["input_scale"] = 30;
  config["optimizer"]["lr"] = 0.001;
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 1.7014118346046923e+38}})");
  Trainer trainer(config);
  const FitSummary summary = trainer.fit();
  EXPECT_GT(summary.skipped_steps, 0);
  EXPECT_LT(summary.skipped_steps, summary.steps);
  for (const auto& p : trainer.model().parameters()) EXPECT_TRUE(p.isfinite().all().item<bool>());
}

/// The loss-side algorithms (no optimizer of their own), with keys that put
/// their term in the loss from the smoke config's second epoch.
inline std::vector<std::pair<std::string, std::string>> loss_side_family() {
  return {{"saf", R"({"epochs_ago": 1, "start_epoch": 1})"}, {"mesa", R"({"start_epoch": 0, "decay": 0.9})"}};
}

/// A small, fast config on the synthetic dataset; tests edit it further.
inline Json smoke_config() {
  return Json::parse(R"({
    "seed": 3, "threads": 1, "max_epochs": 2, "log_every": 1,
    "data": {"name": "synthetic", "train_size": 128, "test_size": 64, "input_shape": [1, 6, 6],
             "num_classes": 3, "batch_size": 16},
    "model": {"name": "mlp", "hidden": [16]},
    "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9}
  })");
}

}  // namespace basin::test
