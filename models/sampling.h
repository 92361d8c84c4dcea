#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "basin/core/data/dataset.h"

namespace basin {

class Model;

/// A run's trained model, as basin-train left it in `run_dir`: the model its
/// config.json names, sized as data_info.json says the data was, with the
/// weights of state_dict.pt. Bad or missing files are a ConfigError naming
/// them.
struct TrainedModel {
  std::shared_ptr<Model> model;
  DatasetInfo info;       // the data's window (input_shape) and vocabulary
  std::string data_name;  // "text": ids are bytes
};
TrainedModel load_trained_model(const std::string& run_dir);

/// How to draw each next token.
struct SamplingOptions {
  int64_t tokens = 200;        // how many to draw
  double temperature = 1.0;    // logits are divided by it; 0 takes the likeliest token
  int64_t top_k = 0;           // draw among the k likeliest (0: all)
  uint64_t seed = 0;           // the draws depend on it alone
  int64_t context = 0;         // the model sees the last `context` tokens (the window it trained on)
};

/// `prompt` (1-D ids, at least one) followed by `options.tokens` ids drawn
/// one at a time from the model's next-token distribution ([1, T, V] logits
/// of forward), in eval mode without gradients. The same seed gives the same
/// ids.
at::Tensor sample_tokens(Model& model, const at::Tensor& prompt, const SamplingOptions& options);

}  // namespace basin
