#pragma once

// What a decoder family's config sizes (Shape), and what its keys say of
// its layers' windows and RoPE, read by the same rules from basin's model
// keys (llama.cpp) and from a checkpoint's config.json
// (llama_hugging_face.cpp), absent keys taking the defaults of the family's
// Hugging Face config class.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "basin/core/config/json.h"
#include "basin/models/decoder_families.h"
#include "basin/models/rope.h"

namespace basin::llama {

/// What the config sizes, by the names of Hugging Face's configs, with the
/// family's row for what the keys do not say.
struct Shape {
  const Family* family;
  int64_t vocab_size, max_position_embeddings, hidden_size, intermediate_size, num_hidden_layers,
      num_attention_heads, num_key_value_heads, head_dim;
  double rms_norm_eps, attention_dropout, initializer_range;
  bool qkv_bias, o_bias, mlp_bias, tie_word_embeddings;
  int64_t query_pre_attn_scalar;              // the attention's scale is its inverse square root
  double attention_softcap, final_softcap;    // 0: none
  int64_t sliding_window;                     // over the "sliding_attention" layers; 0: none
  std::vector<std::string> layer_types;       // "full_attention" or "sliding_attention", a layer each
  std::map<std::string, RopeParameters> rope;  // by layer type, for each type a layer has
  Json window_keys;  // the family's window keys, resolved: what export writes back

  /// The window of layer `layer` (0: none).
  int64_t window_of(int64_t layer) const {
    return layer_types[static_cast<std::size_t>(layer)] == "sliding_attention" ? sliding_window : 0;
  }
};

/// What a family's keys say of its layers' windows and of their RoPE, read
/// from basin's model keys and from config.json alike: `key` gives a key's
/// value (null when absent), `fail` says what is wrong with one (it
/// throws). Absent keys take the defaults of the family's Hugging Face
/// config class. `shape`'s sizes are read first.
using KeyLookup = std::function<Json(const char*)>;
void read_windows(Shape& shape, const KeyLookup& key, const RopeFailure& fail);
void read_rope_of_layers(Shape& shape, const KeyLookup& key, const RopeFailure& fail);

}  // namespace basin::llama
