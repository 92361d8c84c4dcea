// The llama's weights (and the qwen2's and the mistral's) in Hugging Face's
// layout, both ways: a directory of config.json and model.safetensors (or
// the files model.safetensors.index.json splits them over), as
// LlamaForCausalLM (Qwen2ForCausalLM, MistralForCausalLM).save_pretrained
// writes it and from_pretrained reads it.
//
// Names are basin's with "model." before them, but the head's (lm_head); a
// tied head is not stored (a file's lm_head.weight must then equal the
// embedding). Tensors of any floating dtype are read as fp32 master weights
// and written as the model's export_dtype says (fp32 by default). config.json's sizes must be the model's: a difference
// names the key to set. RoPE's theta is read from "rope_theta" (transformers
// 4) or "rope_parameters" (transformers 5) and written as both; any RoPE but
// the default one is refused, naming its key. max_position_embeddings is
// the model's on the way out (set model.max_position_embeddings to the
// checkpoint's to carry it through); on the way in it must be at least the
// model's. A checkpoint split over several files is read through its
// index (read_safetensors_checkpoint); one is written whole up to
// export_max_shard_size, and split as save_pretrained splits it above.
#include <algorithm>
#include <filesystem>

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

/// RoPE's type in `scaling` (either spelling); `fallback` when it names none.
std::string rope_type(const Json& scaling, const std::string& fallback) {
  if (!scaling.is_object()) return fallback;
  return scaling.value("rope_type", scaling.value("type", fallback));
}

/// RoPE's theta and type, from either generation's keys (transformers 4:
/// rope_theta and rope_scaling; 5: rope_parameters).
std::pair<double, std::string> rope_of(const Json& config) {
  const Json parameters = value_or(config, "rope_parameters", Json());
  double theta = value_or(config, "rope_theta", Json(10000.0)).get<double>();
  std::string type = "default";
  if (parameters.is_object()) {
    theta = value_or(parameters, "rope_theta", Json(theta)).get<double>();
    type = rope_type(parameters, type);
  }
  type = rope_type(value_or(config, "rope_scaling", Json()), type);
  return {theta, type};
}

void check_config_values(const Json& config, const Shape& shape, const std::string& path) {
  const std::string where = "config key 'init_from': '" + path + "'";
  const std::string name = name_of(shape.family), architecture = architecture_of(shape.family);
  const Json architectures = value_or(config, "architectures", Json::array({architecture}));
  const std::string model_type = value_or(config, "model_type", Json(name)).get<std::string>();
  if (model_type != name || architectures != Json::array({architecture})) {
    throw ConfigError(where + " has architectures " + architectures.dump() + " (model_type \"" + model_type + "\"); \"" +
                      name + "\" reads " + architecture + " (\"llama\", \"qwen2\" and \"mistral\" read theirs)");
  }
  auto expect = [&](const char* key, const Json& found, const Json& mine) {
    if (found != mine) {
      throw ConfigError(where + " has " + key + " " + found.dump() + ", and the model's is " + mine.dump() +
                        "; set model." + key + " to " + found.dump());
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
  // Where config.json leaves a key out, the family's config class has its own default.
  const Json kv_default = shape.family == Family::kMistral ? Json(8)
                          : shape.family == Family::kQwen2 ? Json(32)
                                                           : config.at("num_attention_heads");
  expect("num_key_value_heads", value_or(config, "num_key_value_heads", kv_default), Json(shape.num_key_value_heads));
  expect("head_dim", value_or(config, "head_dim", Json(shape.hidden_size / shape.num_attention_heads)),
         Json(shape.head_dim));
  // No weight depends on it, but a model meant for fewer positions than its windows is refused.
  const Json positions = value_or(config, "max_position_embeddings", Json(shape.max_position_embeddings));
  if (!positions.is_number_integer() || positions.get<int64_t>() < shape.max_position_embeddings) {
    throw ConfigError(where + " has max_position_embeddings " + positions.dump() + ", fewer than model." +
                      "max_position_embeddings " + std::to_string(shape.max_position_embeddings) +
                      " (the data's window unless set)");
  }
  if (shape.family == Family::kLlama) {
    expect("attention_bias", value_or(config, "attention_bias", Json(false)), Json(shape.qkv_bias));
    expect("mlp_bias", value_or(config, "mlp_bias", Json(false)), Json(shape.mlp_bias));
  }
  // A window that slides over the model's positions: Mistral's everywhere (4096 where the key is left
  // out), Qwen2's in its sliding layers (those of layer_types, else the layers from max_window_layers on
  // where use_sliding_window says so).
  const Json window = value_or(config, "sliding_window", shape.family == Family::kMistral ? Json(4096) : Json());
  bool sliding_layers = shape.family == Family::kMistral;
  if (shape.family == Family::kQwen2) {
    const Json types = value_or(config, "layer_types", Json());
    sliding_layers = types.is_array() ? types.dump().find("sliding_attention") != std::string::npos
                                      : value_or(config, "use_sliding_window", Json(false)) == Json(true) &&
                                            value_or(config, "max_window_layers", Json(28)) < Json(shape.num_hidden_layers);
  }
  if (sliding_layers && window_slides(window, shape.max_position_embeddings)) {
    throw ConfigError(where + " has sliding_window " + window.dump() + (shape.family == Family::kQwen2 ? " in sliding layers" : "") +
                      ", and basin's attention sees the whole window: set model.max_position_embeddings (and the "
                      "data's block_size with it) to at most " + window.dump());
  }
  expect("tie_word_embeddings", config.value("tie_word_embeddings", Json(false)), Json(shape.tie_word_embeddings));
  const double eps = config.value("rms_norm_eps", 1e-6);
  if (eps != shape.rms_norm_eps) expect("rms_norm_eps", Json(eps), Json(shape.rms_norm_eps));
  const auto [theta, type] = rope_of(config);
  if (type != "default") {
    throw ConfigError(where + " has RoPE of type \"" + type + "\" (rope_scaling, rope_parameters); \"" + name +
                      "\" applies the default, unscaled one");
  }
  if (theta != shape.rope_theta) expect("rope_theta", Json(theta), Json(shape.rope_theta));
  const std::string activation = value_or(config, "hidden_act", Json("silu")).get<std::string>();
  if (activation != "silu" && activation != "swish") {
    throw ConfigError(where + " has hidden_act \"" + activation + "\"; \"" + name + "\"'s MLP is SwiGLU (\"silu\")");
  }
}

}  // namespace

NamedTensors read_hugging_face(const Llama& model, const std::string& dir, at::ScalarType& stored_dtype) {
  const Shape& shape = model.shape();
  const Json config = read_hugging_face_config(dir, architecture_of(shape.family));
  check_hugging_face_config(dir + "/config.json", [&] { check_config_values(config, shape, dir + "/config.json"); });
  const std::string where = "config key 'init_from': '" + dir + "'";
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
    if (name == "embed_tokens.weight") stored_dtype = tensor.scalar_type();
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
  Json config{{"architectures", {architecture_of(shape.family)}},
              {"model_type", name_of(shape.family)},
              {"vocab_size", shape.vocab_size},
              {"max_position_embeddings", shape.max_position_embeddings},
              {"hidden_size", shape.hidden_size},
              {"intermediate_size", shape.intermediate_size},
              {"num_hidden_layers", shape.num_hidden_layers},
              {"num_attention_heads", shape.num_attention_heads},
              {"num_key_value_heads", shape.num_key_value_heads},
              {"head_dim", shape.head_dim},
              {"hidden_act", "silu"},
              {"rms_norm_eps", shape.rms_norm_eps},
              // transformers 4 reads the first, 5 the second.
              {"rope_theta", shape.rope_theta},
              {"rope_parameters", {{"rope_theta", shape.rope_theta}, {"rope_type", "default"}}},
              {"rope_scaling", nullptr},
              {"attention_dropout", shape.attention_dropout},
              {"tie_word_embeddings", shape.tie_word_embeddings},
              {"initializer_range", shape.initializer_range},
              // A basin run has no special tokens: without these keys transformers takes its configs'
              // defaults, which name tokens of the run's vocabulary.
              {"bos_token_id", nullptr},
              {"eos_token_id", nullptr},
              {"torch_dtype", torch_dtype_name(model.export_dtype())}};
  switch (shape.family) {
    case Family::kLlama:
      config["attention_bias"] = shape.qkv_bias;
      config["mlp_bias"] = shape.mlp_bias;
      break;
    case Family::kQwen2:
      config["use_sliding_window"] = false;
      config["sliding_window"] = nullptr;
      break;
    case Family::kMistral:
      config["sliding_window"] = shape.sliding_window;  // the model's (null: the key's absence would mean 4096)
      break;
  }
  write_hugging_face_config(dir, config);
}

}  // namespace basin::llama
