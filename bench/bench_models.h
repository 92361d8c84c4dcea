#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "basin/core/config/config.h"

namespace basin::bench {

/// The models benchmarks compare by name: mlp (784-256-10), mlp1024
/// (784-1024-1024-10), mlp2048 (784-2048-2048-10), mlp4096x3
/// (784-4096-4096-4096-10, 36.8M parameters), cnn (models/cnn.cpp's small CNN)
/// or resnet (models/resnet.cpp, width 16, blocks [1, 1, 1]);
/// cnn_contiguous: the cnn on contiguous activations and weights (its
/// "channels_last": false), to measure what channels-last gains; gpt: a
/// GPT-2 of 6 blocks, 512 wide, 8 heads, block 128 and GPT-2's vocabulary of
/// 50257 (44.7M parameters, 25.7M of them the tied embedding), on tokens;
/// gpt2_small and gpt2_medium: GPT-2's two smaller sizes (12 blocks 768
/// wide, 12 heads, 124M parameters; 24 blocks 1024 wide, 16 heads, 355M),
/// on the gpt's tokens;
/// llama: a Llama of 6 layers, 512 wide, 8 heads, 4 key and value heads,
/// SwiGLU 1344 wide (basin's default 1376 would make it 50.2M), block 128,
/// a vocabulary of 32000 and a head of its own (49.9M parameters, 32.8M of
/// them the embedding and the head), on tokens. fortunes_gpt and
/// fortunes_llama: the fortunes examples' models (examples/configs
/// fortunes_gpt_sam.json: 4 blocks, 128 wide, bytes; fortunes_llama.json: 4
/// layers, 128 wide, its BPE's 2048 ids), block 64.
inline const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"mlp", "mlp1024", "mlp2048", "mlp4096x3", "cnn", "cnn_contiguous", "resnet",
                                              "gpt", "gpt2_small", "gpt2_medium", "llama", "fortunes_gpt", "fortunes_llama"};
  return names;
}

/// The gpt's window and vocabulary (bench/gpt_peer_model.py has the same);
/// the llama's window is the gpt's, its vocabulary Llama 2's size
/// (bench/llama_peer_model.py has the same).
constexpr int64_t kGptBlock = 128;
constexpr int64_t kGptVocab = 50257;
constexpr int64_t kLlamaVocab = 32000;

/// The vocabulary of a model trained on tokens, 0 for those trained on images.
inline int64_t token_vocab(const std::string& model) {
  if (model == "fortunes_gpt") return 256;
  if (model == "fortunes_llama") return 2048;
  if (model == "gpt" || model == "gpt2_small" || model == "gpt2_medium") return kGptVocab;
  return model == "llama" ? kLlamaVocab : 0;
}

/// The window of a model trained on tokens.
inline int64_t token_block(const std::string& model) { return model.rfind("fortunes_", 0) == 0 ? 64 : kGptBlock; }

/// The "model" config of one of model_names().
inline Json model_config(const std::string& model) {
  if (model == "mlp") return Json::parse(R"({"name": "mlp", "hidden": [256]})");
  if (model == "mlp1024") return Json::parse(R"({"name": "mlp", "hidden": [1024, 1024]})");
  if (model == "mlp2048") return Json::parse(R"({"name": "mlp", "hidden": [2048, 2048]})");
  if (model == "cnn_contiguous") return Json::parse(R"({"name": "cnn", "channels_last": false})");
  if (model == "mlp4096x3") return Json::parse(R"({"name": "mlp", "hidden": [4096, 4096, 4096]})");
  if (model == "gpt") return Json::parse(R"({"name": "gpt", "n_layer": 6, "n_head": 8, "n_embd": 512})");
  if (model == "gpt2_small") return Json::parse(R"({"name": "gpt", "n_layer": 12, "n_head": 12, "n_embd": 768})");
  if (model == "gpt2_medium") return Json::parse(R"({"name": "gpt", "n_layer": 24, "n_head": 16, "n_embd": 1024})");
  if (model == "fortunes_gpt") return Json::parse(R"({"name": "gpt", "n_layer": 4, "n_head": 4, "n_embd": 128})");
  if (model == "fortunes_llama") {
    return Json::parse(R"({"name": "llama", "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4,
                           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048})");
  }
  if (model == "llama") {
    return Json::parse(R"({"name": "llama", "hidden_size": 512, "intermediate_size": 1344, "num_hidden_layers": 6,
                           "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000,
                           "tie_word_embeddings": false})");
  }
  return {{"name", model}};
}

}  // namespace basin::bench
