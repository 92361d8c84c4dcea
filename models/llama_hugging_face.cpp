// The weights of the llama and of every family of decoder_families.h in
// Hugging Face's layout, both ways: a directory of config.json and
// model.safetensors (or the files model.safetensors.index.json splits them
// over), as <the row's class>.save_pretrained writes it and from_pretrained
// reads it.
//
// Names are basin's with "model." before them, but the head's (lm_head); a
// tied head is not stored (a file's lm_head.weight must then equal the
// embedding). Tensors of any floating dtype are read as fp32 master weights
// and written as the model's export_dtype says (fp32 by default).
// The model keys a config leaves out are config.json's (pretrained_keys,
// which the trainer reads first: core/model/pretrained_keys.h); those it
// gives must agree with config.json's: its sizes, biases, norms, caps, and
// its windows and RoPE read by the rules the model's own keys are read by
// (decoder_shape.h's read_windows and read_rope_of_layers), absent keys
// taking the config class's defaults; a difference names the keys. The
// export writes every key that shapes the model, windows and RoPE scaling
// included (RoPE as transformers 4's rope_theta and rope_scaling and 5's
// rope_parameters). max_position_embeddings is the model's on the way out
// (the checkpoint's, unless the config sets it); on the way in it must be
// at least the model's. A checkpoint
// split over several files is read through its index
// (read_safetensors_checkpoint); one is written whole up to
// export_max_shard_size, and split as save_pretrained splits it above.
#include <algorithm>
#include <filesystem>

#include "basin/core/base/console.h"
#include "basin/core/config/config_error.h"
#include "basin/core/config/json.h"
#include "basin/core/serialization/safetensors_checkpoint.h"
#include "basin/core/serialization/safetensors_file.h"
#include "basin/models/hugging_face_files.h"
#include "basin/models/llama.h"

namespace basin::llama {
namespace {

/// config.json's torch_dtype for the dtype hf/ is written in.
const char* torch_dtype_name(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? "bfloat16" : dtype == at::kHalf ? "float16" : "float32";
}

const std::string kPrefix = "model.";

/// A key whose null means absent, as transformers reads it.
Json value_or(const Json& config, const char* key, const Json& absent) {
  const auto found = config.find(key);
  return found == config.end() || found->is_null() ? absent : *found;
}

/// Equal as JSON, whatever the order of the objects' keys (basin's Json keeps it).
bool same_json(const Json& a, const Json& b) { return nlohmann::json::parse(a.dump()) == nlohmann::json::parse(b.dump()); }

/// "[0, 2, 4]": the layers whose window is `window`.
std::string layers_with(const Shape& shape, int64_t window) {
  std::string list;
  for (int64_t i = 0; i < shape.num_hidden_layers; ++i) {
    if (shape.window_of(i) == window) list += (list.empty() ? "" : ", ") + std::to_string(i);
  }
  return "[" + list + "]";
}

/// The keys that place a family's windows, for a refusal to name.
std::string window_keys_of(const Family& family) {
  switch (family.windows) {
    case WindowRule::kEveryLayer: return "model.sliding_window";
    case WindowRule::kFromWindowLayer: return "model.use_sliding_window, sliding_window and max_window_layers (or layer_types)";
    case WindowRule::kPattern: return "model.sliding_window and layer_types";
    case WindowRule::kNone: break;
  }
  return "";
}

void check_config_values(const Json& config, const Shape& shape, const std::string& path) {
  const Family& family = *shape.family;
  const std::string where = "config key 'init_from': '" + path + "'";
  const std::string name = family.name, architecture = family.architecture;
  check_checkpoint_kind(config, family, where);
  // The model's keys are config.json's where the config leaves them out: a difference is a key the config gives.
  auto expect = [&](const std::string& key, const Json& found, const Json& mine) {
    if (found != mine) {
      throw ConfigError(where + " has " + key + " " + found.dump() + ", and model." + key + " is " + mine.dump() +
                        "; leave model." + key + " out to take config.json's, or set it to " + found.dump());
    }
  };
  auto size = [&](const char* key, int64_t mine) {
    if (!config.contains(key) || !config.at(key).is_number_integer()) {
      throw ConfigError(where + " has no integer \"" + key + "\"; expected " + architecture + "'s config");
    }
    expect(key, config.at(key), Json(mine));
  };
  size("vocab_size", shape.vocab_size);
  size("hidden_size", shape.hidden_size);
  size("intermediate_size", shape.intermediate_size);
  size("num_hidden_layers", shape.num_hidden_layers);
  size("num_attention_heads", shape.num_attention_heads);
  // Where config.json leaves a key out (or null), what the family's config class makes of it, as the keys
  // taken from it read; where that is nothing, derived as the model derives it.
  const Json read = checkpoint_model_keys(config, family);
  expect("num_key_value_heads", read.value("num_key_value_heads", config.at("num_attention_heads")), Json(shape.num_key_value_heads));
  expect("head_dim", read.value("head_dim", Json(shape.hidden_size / shape.num_attention_heads)), Json(shape.head_dim));
  // No weight depends on it, but a model meant for fewer positions than its windows is refused.
  const Json positions = value_or(config, "max_position_embeddings", Json(shape.max_position_embeddings));
  if (!positions.is_number_integer() || positions.get<int64_t>() < shape.max_position_embeddings) {
    throw ConfigError(where + " has max_position_embeddings " + positions.dump() + ", fewer than model." +
                      "max_position_embeddings " + std::to_string(shape.max_position_embeddings) +
                      " (the data's window unless set)");
  }
  if (family.attention_bias == AttentionBias::kByKey) {
    expect("attention_bias", value_or(config, "attention_bias", Json(false)), Json(shape.qkv_bias));
  }
  if (family.mlp_bias_key) expect("mlp_bias", value_or(config, "mlp_bias", Json(false)), Json(shape.mlp_bias));
  expect("tie_word_embeddings", value_or(config, "tie_word_embeddings", Json(family.hf_tied)), Json(shape.tie_word_embeddings));
  const double eps = value_or(config, "rms_norm_eps", Json(1e-6)).get<double>();
  if (eps != shape.rms_norm_eps) expect("rms_norm_eps", Json(eps), Json(shape.rms_norm_eps));
  const std::string activation = value_or(config, family.activation_key, Json(family.activation)).get<std::string>();
  if (activation != family.activation && !(activation == "swish" && std::string(family.activation) == "silu")) {
    throw ConfigError(where + " has " + family.activation_key + " \"" + activation + "\"; \"" + name +
                      "\"'s MLP takes \"" + family.activation + "\"");
  }
  if (family.attention_scalar) {
    expect("query_pre_attn_scalar", read.at("query_pre_attn_scalar"),
           Json(shape.query_pre_attn_scalar));
  }
  if (family.softcap_keys) {
    // A key present as null means no cap; absent, the class's default.
    auto cap = [&](const char* key, double fallback, double mine) {
      const auto found = config.find(key);
      const double theirs = found == config.end() ? fallback : found->is_null() ? 0.0 : found->get<double>();
      if (theirs != mine) expect(key, theirs == 0 ? Json() : Json(theirs), mine == 0 ? Json() : Json(mine));
    };
    // Gemma 3's class keeps an attention cap it never applies: whatever config.json says of it, none.
    if (family.caps_attention) cap("attn_logit_softcapping", family.default_attention_softcap, shape.attention_softcap);
    cap("final_logit_softcapping", family.default_final_softcap, shape.final_softcap);
  }
  if (value_or(config, "use_bidirectional_attention", Json(false)) == Json(true)) {
    throw ConfigError(where + " has use_bidirectional_attention true; basin's attention is causal");
  }

  // The windows and RoPE config.json's keys give, read as the model's are, by the same rules.
  Shape theirs = shape;
  theirs.max_position_embeddings = positions.get<int64_t>();
  const KeyLookup key = [&](const char* name) {
    const auto found = config.find(name);
    return found == config.end() ? Json(Json::value_t::discarded) : *found;
  };
  const RopeFailure fail = [&](const std::string& inner, const std::string& expected, const Json& value) {
    throw ConfigError(where + ": \"" + inner + "\" is " + value.dump() + "; expected " + expected);
  };
  read_windows(theirs, key, fail);
  for (int64_t i = 0; i < shape.num_hidden_layers; ++i) {
    if (theirs.window_of(i) == shape.window_of(i)) continue;
    const int64_t window = theirs.window_of(i);
    throw ConfigError(where + " slides " + (window > 0 ? "a window of " + std::to_string(window) : std::string("no window")) +
                      " over layers " + layers_with(theirs, window) + " (sliding_window " +
                      (theirs.sliding_window > 0 ? std::to_string(theirs.sliding_window) : "null") + "), and the model " +
                      (shape.window_of(i) > 0 ? "one of " + std::to_string(shape.window_of(i)) : std::string("none")) +
                      " over layer " + std::to_string(i) + "; set " + window_keys_of(family) + " as config.json has them");
  }
  read_rope_of_layers(theirs, key, fail);
  // What a type derives from max_position_embeddings where its keys leave it out, beside the keys.
  auto resolved = [](const RopeParameters& rope) {
    Json keys = rope.keys;
    if (rope.original_max_position_embeddings > 0) keys["original_max_position_embeddings"] = rope.original_max_position_embeddings;
    if (rope.type != "default") keys["factor"] = rope.factor;
    return keys;
  };
  // Layer by layer: where the windows agree, the layers' types may still be named apart.
  for (int64_t i = 0; i < shape.num_hidden_layers; ++i) {
    const std::string& type = shape.layer_types[static_cast<std::size_t>(i)];
    const RopeParameters& mine = shape.rope.at(type);
    const RopeParameters& found = theirs.rope.at(theirs.layer_types[static_cast<std::size_t>(i)]);
    if (same_json(resolved(found), resolved(mine))) continue;
    if (same_json(found.keys, mine.keys)) {
      throw ConfigError(where + "'s RoPE takes its factor or original length from max_position_embeddings " +
                        positions.dump() + ", and the model's is " + std::to_string(shape.max_position_embeddings) +
                        "; set model.max_position_embeddings to " + positions.dump());
    }
    Json found_rest = found.keys, mine_rest = mine.keys;
    found_rest.erase("rope_theta"), mine_rest.erase("rope_theta");
    if (same_json(found_rest, mine_rest)) {
      expect(family.rope_per_layer_type && type == "sliding_attention" ? "rope_local_base_freq" : "rope_theta",
             Json(found.theta), Json(mine.theta));
    }
    throw ConfigError(where + " has RoPE " + found.keys.dump() + " on layer " + std::to_string(i) + " (rope_scaling, " +
                      "rope_parameters), and the model's is " + mine.keys.dump() +
                      "; set model.rope_parameters (or rope_scaling) to config.json's");
  }
}

/// config.json's RoPE keys for `shape`: transformers 4 reads rope_theta and
/// rope_scaling, 5 rope_parameters (nested by layer type where the family's
/// layers differ), and both read them the same.
void write_rope(Json& config, const Shape& shape) {
  const Family& family = *shape.family;
  const auto full = shape.rope.find("full_attention");
  const RopeParameters& global = full != shape.rope.end() ? full->second : shape.rope.begin()->second;
  config["rope_theta"] = global.theta;
  config["rope_scaling"] = global.type == "default" ? Json() : global.keys;
  if (!family.rope_per_layer_type) {
    config["rope_parameters"] = global.keys;
    return;
  }
  config["rope_parameters"] = Json::object();
  for (const auto& [type, rope] : shape.rope) config["rope_parameters"][type] = rope.keys;
  const auto local = shape.rope.find("sliding_attention");
  if (local != shape.rope.end()) config["rope_local_base_freq"] = local->second.theta;
}


}  // namespace

NamedTensors read_hugging_face(const Llama& model, const std::string& dir, LoadedCheckpoint& loaded) {
  const Shape& shape = model.shape();
  const Json config = read_hugging_face_config(dir, shape.family->architecture);
  check_hugging_face_config(dir + "/config.json", [&] { check_config_values(config, shape, dir + "/config.json"); });
  const std::string where = "config key 'init_from': '" + dir + "'";
  // The special tokens go back out with the weights (generation stops at eos_token_id). transformers loads
  // any value (older conversions say pad_token_id -1); an export writes ids of the vocabulary alone.
  loaded.token_ids = Json::object();
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    const Json ids = value_or(config, key, Json());
    bool valid = true;
    for (const Json& id : ids.is_array() ? ids : Json::array({ids})) {
      valid = valid && (id.is_null() ? !ids.is_array() : id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < shape.vocab_size);
    }
    if (valid && !ids.is_null()) loaded.token_ids[key] = ids;
    if (!valid) {
      console::warn("'" + dir + "/config.json' has " + key + " " + ids.dump() + ", no token id below vocab_size " +
                    std::to_string(shape.vocab_size) + " (nor a list of them): the export writes " + key + " null");
    }
  }
  NamedTensors tensors;
  at::Tensor head;
  const std::string frequencies = "rotary_emb.inv_freq";
  NamedTensors stored_tensors = read_safetensors_checkpoint(dir, "init_from");
  for (auto& [stored, tensor] : stored_tensors) {
    const std::string name = stored.rfind(kPrefix, 0) == 0 ? stored.substr(kPrefix.size()) : stored;
    // RoPE's frequencies, which older checkpoints stored: computed from rope_theta here.
    if (name.size() >= frequencies.size() &&
        name.compare(name.size() - frequencies.size(), frequencies.size(), frequencies) == 0) {
      continue;
    }
    if (!at::isFloatingType(tensor.scalar_type())) {
      throw ConfigError(where + ": tensor '" + stored + "' holds " + std::string(c10::toString(tensor.scalar_type())) +
                        ", not floating-point weights");
    }
    if (name == "embed_tokens.weight") loaded.dtype = tensor.scalar_type();
    at::Tensor value = tensor.to(at::kFloat);
    tensor = at::Tensor();  // the file's copy goes as its fp32 one comes: a bf16 checkpoint peaks near 2x, not 3x
    if (name == "lm_head.weight" && shape.tie_word_embeddings) {
      head = value;  // what an untied writer stored beside a tied model: it must equal the embedding
      continue;
    }
    tensors.emplace_back(name, value);
  }
  if (head.defined()) {
    const at::Tensor* embedding = find_tensor(tensors, "embed_tokens.weight");
    if (embedding != nullptr && !head.equal(*embedding)) {
      throw ConfigError(where + "'s lm_head.weight differs from model.embed_tokens.weight, and the model ties them "
                        "(tie_word_embeddings true); set model.tie_word_embeddings to false");
    }
  }
  return tensors;
}

void write_hugging_face(Llama& model, const std::string& dir) {
  const Shape& shape = model.shape();
  std::filesystem::create_directories(dir);
  NamedTensors tensors;
  for (auto& [name, value] : parameters_to_write(model, model.export_dtype())) {
    const std::string stored = name.rfind("lm_head.", 0) == 0 ? name : kPrefix + name;
    tensors.emplace_back(stored, value.contiguous());
  }
  write_safetensors_checkpoint(dir, tensors, model.export_max_shard_bytes(), {{"format", "pt"}});
  const Family& family = *shape.family;
  Json config{{"architectures", {family.architecture}},
              {"model_type", family.model_type},
              {"vocab_size", shape.vocab_size},
              {"max_position_embeddings", shape.max_position_embeddings},
              {"hidden_size", shape.hidden_size},
              {"intermediate_size", shape.intermediate_size},
              {"num_hidden_layers", shape.num_hidden_layers},
              {"num_attention_heads", shape.num_attention_heads},
              {"num_key_value_heads", shape.num_key_value_heads},
              {"head_dim", shape.head_dim},
              {family.activation_key, family.activation},
              {"rms_norm_eps", shape.rms_norm_eps},
              {"attention_dropout", shape.attention_dropout},
              {"tie_word_embeddings", shape.tie_word_embeddings},
              {"initializer_range", shape.initializer_range},
              // The checkpoint's special tokens, as init_from's config.json gave them; a run from scratch has
              // none: without these keys transformers takes its configs' defaults, which name tokens of the
              // run's vocabulary (Gemma's pad token 0 would be a padding row).
              {"bos_token_id", model.loaded().token_ids.value("bos_token_id", Json())},
              {"eos_token_id", model.loaded().token_ids.value("eos_token_id", Json())},
              {"pad_token_id", model.loaded().token_ids.value("pad_token_id", Json())},
              {"torch_dtype", torch_dtype_name(model.export_dtype())}};
  write_rope(config, shape);
  if (family.attention_bias == AttentionBias::kByKey) config["attention_bias"] = shape.qkv_bias;
  if (family.mlp_bias_key) config["mlp_bias"] = shape.mlp_bias;
  // Every key that places a window, the model's (null where it has none: an absent key means 4096 to some classes).
  config.update(shape.window_keys);
  if (family.attention_scalar) config["query_pre_attn_scalar"] = shape.query_pre_attn_scalar;
  if (family.softcap_keys) {
    config["attn_logit_softcapping"] = shape.attention_softcap > 0 ? Json(shape.attention_softcap) : Json();
    config["final_logit_softcapping"] = shape.final_softcap > 0 ? Json(shape.final_softcap) : Json();
  }
  write_hugging_face_config(dir, config);
}

}  // namespace basin::llama
