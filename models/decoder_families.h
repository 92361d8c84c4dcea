#pragma once

// The checkpoints made of Llama's decoder layer, one row each: what tells
// them apart (biases, norms, the MLP's activation, scalings, windows, RoPE)
// and the defaults their Hugging Face config classes give keys that
// config.json leaves out. The layer (llama.cpp), the loader and the
// exporter (llama_hugging_face.cpp) read the row; a new family is its row,
// and a part of its own where it has one.
#include <cstdint>
#include <string>
#include <vector>

namespace basin::llama {

/// Which projections of the attention carry a bias.
enum class AttentionBias {
  kByKey,  // q, k, v and o, as "attention_bias" says (false by default)
  kQkv,    // q, k and v always, o never (Qwen2)
  kNone,
};

/// Where windows slide, and by which keys.
enum class WindowRule {
  kNone,             // no window keys (Llama)
  kEveryLayer,       // "sliding_window" on every layer, null for none (Mistral)
  kFromWindowLayer,  // "use_sliding_window", "sliding_window" on layers from "max_window_layers" on, or "layer_types" (Qwen2, Qwen3)
  kPattern,          // "sliding_window" on "layer_types"' sliding layers, by default all but each `pattern`th (Gemma)
};

struct Family {
  const char* name;          // the model's registered name
  const char* model_type;    // config.json's
  const char* architecture;  // Hugging Face's class
  AttentionBias attention_bias;
  bool mlp_bias_key;     // "mlp_bias" puts a bias on the MLP's projections (Llama)
  bool norm_plus_one;    // RMSNorm as x·(1 + w) in fp32, w starting at 0 (Gemma); else x·w, w starting at 1
  bool sandwich_norms;   // norms after attention and after the MLP too: four a layer (Gemma)
  bool qk_norms;         // an RMSNorm over each head of q and k before RoPE (Qwen3, Gemma 3)
  bool scaled_embeddings;  // embeddings times sqrt(hidden_size), rounded to the weights' dtype (Gemma)
  bool attention_scalar;   // "query_pre_attn_scalar" sets the attention's scale (Gemma); else 1/sqrt(head_dim)
  bool softcap_keys;       // "attn_logit_softcapping" and "final_logit_softcapping" (Gemma 2 and 3)
  bool caps_attention;     // the attention's cap applies (Gemma 2; Gemma 3's class has the key and never applies it)
  double default_attention_softcap, default_final_softcap;  // 0: none
  const char* activation_key;  // "hidden_act" or "hidden_activation"
  const char* activation;      // "silu" (SwiGLU) or "gelu_pytorch_tanh" (GeGLU)
  WindowRule windows;
  int64_t window_pattern;  // kPattern: each pattern-th layer is full
  const char* window_pattern_key;  // a key that sets window_pattern ("sliding_window_pattern", Gemma 3's older one), or null
  bool rope_per_layer_type;  // rope_parameters nested by layer type, with a local theta of its own (Gemma 3)
  bool bidirectional_key;    // "use_bidirectional_attention" (Gemma 3's, for its embedding models): refused when true
  // What the config class takes where config.json says nothing (0: derived as the class derives it).
  int64_t hf_key_value_heads;  // 0: num_attention_heads
  int64_t hf_head_dim;         // 0: hidden_size / num_attention_heads
  bool hf_tied;
  double hf_theta, hf_local_theta;
  int64_t hf_window;            // sliding_window's default where the key is absent (0: none)
  int64_t hf_attention_scalar;  // query_pre_attn_scalar's
};

/// The rows: "llama", "qwen2", "mistral", "qwen3", "gemma2", "gemma3" (model_type "gemma3_text").
const std::vector<Family>& families();
/// The row named `name`; std::out_of_range if none.
const Family& family_named(const std::string& name);

}  // namespace basin::llama
