#pragma once

// What the language models share (models/gpt.h, models/llama.h): their
// check of the data, and layers. Not installed: the models are used by
// their registered names.
#include <cstdint>
#include <string>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "basin/core/config/config_error.h"
#include "basin/core/data/dataset.h"
#include "basin/core/model/adaptable_linear.h"

namespace basin::layers {

/// Refuses data that is no token windows (ids [N, T] to next ids [N, T]),
/// naming `model` ("gpt", "llama") and what the data is.
inline void require_token_windows(const std::string& model, const DatasetInfo& info) {
  if (info.input_shape.size() == 1 && info.num_classes >= 2) return;
  throw ConfigError("config key 'model': \"" + model + "\" needs token windows (data \"text\" or \"tokens\", or "
                    "integer x [N, T] with y [N, T]); the data's samples are " +
                    c10::str(at::IntArrayRef(info.input_shape)) + " in " + std::to_string(info.num_classes) + " classes");
}

/// y = x W^T (+ b): a linear layer whose bias may be absent, which takes a
/// low-rank adapter ("adapters.lora"). Weights start normal(0, std), a bias zero.
class Projection : public AdaptableLinear {
 public:
  Projection(int64_t in, int64_t out, bool bias, double std)
      : AdaptableLinear(at::empty({out, in}).normal_(0, std), bias ? at::zeros({out}) : at::Tensor()) {}
};

/// A table of row vectors (token or position embeddings), normal(0, std) at first.
class Embedding : public torch::nn::Module {
 public:
  Embedding(int64_t rows, int64_t width, double std = 0.02) {
    weight = register_parameter("weight", at::empty({rows, width}).normal_(0, std));
  }
  at::Tensor forward(const at::Tensor& ids) const { return at::embedding(weight, ids); }

  at::Tensor weight;
};

}  // namespace basin::layers
