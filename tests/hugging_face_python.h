#pragma once

// Where the tests find PyPI's transformers, to hand weights to Hugging Face
// and back, and the way back checked.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/serialization/torch_save_file.h"
#include "basin/core/train/trainer.h"
#include "test_util.h"

namespace basin::test {

/// A Python with PyPI's torch, transformers and safetensors: BASIN_HF_PYTHON,
/// else the PyPI LibTorch's virtual environment (scripts/libtorch.sh), where
/// scripts/hf-python.sh installs them; empty when neither has them.
inline std::string hugging_face_python() {
  std::vector<std::string> candidates;
  if (const char* given = std::getenv("BASIN_HF_PYTHON")) candidates.emplace_back(given);
  const char* cache = std::getenv("BASIN_CACHE");
  const char* home = std::getenv("HOME");
  if (cache != nullptr) candidates.push_back(std::string(cache) + "/torch-2.11.0/bin/python");
  if (home != nullptr) candidates.push_back(std::string(home) + "/.cache/basin/torch-2.11.0/bin/python");
  for (const std::string& python : candidates) {
    if (std::system((python + " -c 'import torch, transformers, safetensors' > /dev/null 2>&1").c_str()) == 0) return python;
  }
  return "";
}

/// Trains `trainer` (started from Hugging Face weights that gave `reference`
/// on `ids`), exports it to `dir`/run, and
/// checks that transformers' `model_class`, loaded from `dir`/run/hf, computes
/// basin's trained logits on `ids` to 1e-5; `checks` is Python run on the
/// loaded `model` first.
inline void expect_trained_model_loads_in_transformers(Trainer& trainer, const std::string& python, const TempDir& dir,
                                                       const std::string& model_class, const at::Tensor& ids,
                                                       const at::Tensor& reference, const std::string& checks = "") {
  trainer.fit();
  std::filesystem::remove_all(dir.file("run"));
  std::filesystem::create_directories(dir.file("run"));
  trainer.export_model(dir.file("run"));
  trainer.model().eval();
  at::NoGradGuard no_grad;
  const at::Tensor trained = trainer.model().forward(ids);
  EXPECT_GT((trained - reference).abs().max().item<double>(), 1e-3) << "training moved nothing";
  c10::Dict<std::string, at::Tensor> saved;
  saved.insert("ids", ids);
  saved.insert("logits", trained);
  write_torch_save_file(dir.file("trained.pt"), saved);
  const auto loaded = run_command(
      "env -C " + dir.path().string() + " " + python + " -c \"import torch, transformers\n"
      "model = transformers." + model_class + ".from_pretrained('run/hf').eval()\n" + checks +
      "trained = torch.load('trained.pt')\n"
      "with torch.no_grad(): logits = model(trained['ids']).logits\n"
      "difference = (logits - trained['logits']).abs().max().item()\n"
      "print('python: largest difference from basin', difference)\n"
      "assert difference < 1e-5, difference\"", 300);
  EXPECT_EQ(loaded.exit_code, 0) << loaded.output;
}

}  // namespace basin::test
