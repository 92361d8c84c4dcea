#include "basin/models/decoder_families.h"

#include <stdexcept>

namespace basin::llama {

const std::vector<Family>& families() {
  // Each from its transformers 5 modeling and configuration files.
  static const std::vector<Family> rows{
      {"llama", "llama", "LlamaForCausalLM", AttentionBias::kByKey, /*mlp_bias_key=*/true, /*norm_plus_one=*/false,
       /*sandwich_norms=*/false, /*qk_norms=*/false, /*scaled_embeddings=*/false, /*attention_scalar=*/false,
       /*softcap_keys=*/false, /*caps_attention=*/false, 0, 0, "hidden_act", "silu", WindowRule::kNone, 0, nullptr, /*rope_per_layer_type=*/false,
       /*bidirectional_key=*/false,
       /*hf_key_value_heads=*/0, /*hf_head_dim=*/0, /*hf_tied=*/false, 10000.0, 10000.0, /*hf_window=*/0, 0},
      {"qwen2", "qwen2", "Qwen2ForCausalLM", AttentionBias::kQkv, false, false, false, false, false, false, false, false, 0, 0,
       "hidden_act", "silu", WindowRule::kFromWindowLayer, 0, nullptr, false, false, 32, 0, false, 10000.0, 10000.0, 4096, 0},
      {"mistral", "mistral", "MistralForCausalLM", AttentionBias::kNone, false, false, false, false, false, false, false, false, 0, 0,
       "hidden_act", "silu", WindowRule::kEveryLayer, 0, nullptr, false, false, 8, 0, false, 10000.0, 10000.0, 4096, 0},
      {"qwen3", "qwen3", "Qwen3ForCausalLM", AttentionBias::kByKey, false, false, false, /*qk_norms=*/true, false, false,
       false, false, 0, 0, "hidden_act", "silu", WindowRule::kFromWindowLayer, 0, nullptr, false, false, 32, 128, false, 10000.0, 10000.0,
       4096, 0},
      {"gemma2", "gemma2", "Gemma2ForCausalLM", AttentionBias::kByKey, false, /*norm_plus_one=*/true, /*sandwich_norms=*/true,
       false, /*scaled_embeddings=*/true, /*attention_scalar=*/true, /*softcap_keys=*/true, /*caps_attention=*/true, 50.0, 30.0,
       "hidden_activation", "gelu_pytorch_tanh", WindowRule::kPattern, 2, nullptr, false, false, 4, 256, /*hf_tied=*/true, 10000.0,
       10000.0, 4096, 256},
      {"gemma3", "gemma3_text", "Gemma3ForCausalLM", AttentionBias::kByKey, false, true, true, /*qk_norms=*/true, true, true,
       /*softcap_keys=*/true, /*caps_attention=*/false, 0, 0, "hidden_activation", "gelu_pytorch_tanh", WindowRule::kPattern, 6, "sliding_window_pattern",
       /*rope_per_layer_type=*/true, /*bidirectional_key=*/true,
       4, 256, true, 1000000.0, 10000.0, 4096, 256},
  };
  return rows;
}

const Family& family_named(const std::string& name) {
  for (const Family& family : families()) {
    if (name == family.name) return family;
  }
  throw std::out_of_range("no decoder family \"" + name + "\"");
}

}  // namespace basin::llama
