// The keys a family's model takes from a checkpoint's config.json
// (core/model/pretrained_keys.h): each key the model reads, as present (a
// null only where it means something other than absence: Mistral's window,
// Gemma's caps), and the config class's defaults where the model's own
// differ; RoPE's keys and the window's keys each a group, taken only where
// the config gives none of it.
#include "basin/core/config/config_error.h"
#include "basin/core/model/pretrained_keys.h"
#include "basin/models/hugging_face_files.h"
#include "basin/models/llama.h"

namespace basin::llama {

void check_checkpoint_kind(const Json& config, const Family& family, const std::string& where) {
  const std::string architecture = family.architecture;
  auto given = [&](const char* key, const Json& absent) {
    const auto found = config.find(key);
    return found == config.end() || found->is_null() ? absent : *found;
  };
  const Json architectures = given("architectures", Json::array({architecture}));
  const Json model_type = given("model_type", Json(family.model_type));
  if (model_type != Json(family.model_type) || architectures != Json::array({architecture})) {
    std::string known;
    for (const Family& row : families()) known += std::string(known.empty() ? "" : ", ") + "\"" + row.name + "\"";
    throw ConfigError(where + " has architectures " + architectures.dump() + " (model_type " + model_type.dump() + "); \"" +
                      family.name + "\" reads " + architecture + " (" + known + " read theirs)");
  }
}

Json checkpoint_model_keys(const Json& config, const Family& family) {
  Json keys = Json::object();
  auto take = [&](const char* key, bool null_counts = false) {
    const auto found = config.find(key);
    if (found != config.end() && (null_counts || !found->is_null())) keys[key] = *found;
  };
  for (const char* key : {"vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "rms_norm_eps", "attention_dropout", "initializer_range",
                          "tie_word_embeddings", "rope_theta", "partial_rotary_factor",
                          "original_max_position_embeddings", "rope_scaling", "rope_parameters"}) {
    take(key);
  }
  // Absent, the class's default; null, derived as the classes derive it (the heads; hidden / heads).
  take("num_key_value_heads");
  if (config.contains("num_key_value_heads") && config.at("num_key_value_heads").is_null()) {
    take("num_attention_heads");
    if (keys.contains("num_attention_heads")) keys["num_key_value_heads"] = keys["num_attention_heads"];
  } else if (!keys.contains("num_key_value_heads") && family.hf_key_value_heads > 0) {
    keys["num_key_value_heads"] = family.hf_key_value_heads;
  }
  take("head_dim");
  if (!config.contains("head_dim") && family.hf_head_dim > 0) keys["head_dim"] = family.hf_head_dim;
  if (family.attention_bias == AttentionBias::kByKey) take("attention_bias");
  if (family.mlp_bias_key) take("mlp_bias");
  if (family.attention_scalar) {
    take("query_pre_attn_scalar");
    if (!keys.contains("query_pre_attn_scalar")) keys["query_pre_attn_scalar"] = family.hf_attention_scalar;
  }
  if (family.softcap_keys && family.caps_attention) take("attn_logit_softcapping", true);
  if (family.softcap_keys) take("final_logit_softcapping", true);
  if (family.rope_per_layer_type) take("rope_local_base_freq");
  if (family.bidirectional_key) take("use_bidirectional_attention");
  if (family.window_pattern_key) take(family.window_pattern_key);
  if (family.windows != WindowRule::kNone) take("sliding_window", true);
  if (family.windows == WindowRule::kFromWindowLayer) {
    take("use_sliding_window");
    take("max_window_layers");
  }
  if (family.windows == WindowRule::kFromWindowLayer || family.windows == WindowRule::kPattern) take("layer_types");
  return keys;
}

namespace {

PretrainedKeys pretrained_keys(const Family& family, const std::string& dir) {
  const Json config = read_hugging_face_config(dir, family.architecture);
  const std::string path = dir + "/config.json";
  PretrainedKeys taken;
  check_hugging_face_config(path, [&] {
    check_checkpoint_kind(config, family, "config key 'init_from': '" + path + "'");
    taken.keys = checkpoint_model_keys(config, family);
  });
  taken.groups = {{"rope_theta", "rope_scaling", "rope_parameters", "original_max_position_embeddings", "partial_rotary_factor",
                   "rope_local_base_freq"},
                  {"sliding_window", "use_sliding_window", "max_window_layers", "layer_types"}};
  if (family.window_pattern_key) taken.groups.back().push_back(family.window_pattern_key);
  return taken;
}

// Each family's keys from a checkpoint, by the family's name.
[[maybe_unused]] const bool registered = [] {
  for (const Family& family : families()) {
    pretrained_keys_readers()[family.name] = [&family](const std::string& dir) { return pretrained_keys(family, dir); };
  }
  return true;
}();

}  // namespace
}  // namespace basin::llama
