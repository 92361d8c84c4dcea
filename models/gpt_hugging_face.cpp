// The gpt's weights in Hugging Face's GPT-2 layout, both ways: a directory
// of config.json and model.safetensors (or the files
// model.safetensors.index.json splits them over), as
// GPT2LMHeadModel.save_pretrained writes it and from_pretrained reads it.
//
// Names are basin's with "transformer." before them (read with or without
// it); GPT-2's Conv1D stores the four projection weights [in, out], basin's
// linear layers [out, in], so they are transposed both ways. The head is tied
// to wte (a file's lm_head.weight must equal it). Position rows past the
// model's block_size are dropped on the way in (a shorter context, as
// nanoGPT's crop_block_size), and config.json's n_positions is the model's
// block_size on the way out. A model without biases ("bias": false) is
// written with zero biases, which compute the same. The sizes a config
// leaves out are config.json's (n_layer, n_head, n_embd, vocab_size).
#include <algorithm>
#include <filesystem>
#include <map>

#include "basin/core/config/config_error.h"
#include "basin/core/config/json.h"
#include "basin/core/model/pretrained_keys.h"
#include "basin/core/serialization/safetensors_checkpoint.h"
#include "basin/models/gpt.h"
#include "basin/models/hugging_face_files.h"

namespace basin::gpt {
namespace {

const std::string kPrefix = "transformer.";

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

/// GPT-2's Conv1D weights, stored [in, out].
bool conv1d(const std::string& name) {
  for (const char* tail : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}) {
    if (ends_with(name, tail)) return true;
  }
  return false;
}

/// config.json's sizes against the model's: a difference names both. Returns n_positions.
int64_t check_config_values(const Json& config, const Shape& shape, const std::string& path) {
  const std::string where = "config key 'init_from': '" + path + "'";
  auto size = [&](const char* key) -> int64_t {
    if (!config.contains(key) || !config.at(key).is_number_integer() || config.at(key).get<int64_t>() < 1) {
      throw ConfigError(where + " has no positive integer \"" + key + "\"; expected GPT-2's config");
    }
    return config.at(key).get<int64_t>();
  };
  if (config.value("model_type", std::string("gpt2")) != "gpt2") {
    throw ConfigError(where + " is a \"" + config.value("model_type", std::string()) +
                      "\" model; \"gpt\" reads GPT-2 (model_type \"gpt2\")");
  }
  for (const auto& [key, mine] : {std::pair<const char*, int64_t>{"n_layer", shape.n_layer},
                                  {"n_head", shape.n_head}, {"n_embd", shape.n_embd},
                                  {"vocab_size", shape.vocab_size}}) {
    if (size(key) != mine) {
      throw ConfigError(where + " has " + key + " " + std::to_string(size(key)) + ", and model." + key + " is " +
                        std::to_string(mine) + "; leave model." + key + " out to take config.json's, or set it to " +
                        std::to_string(size(key)));
    }
  }
  if (size("n_positions") < shape.block_size) {
    throw ConfigError(where + " has n_positions " + std::to_string(size("n_positions")) + ", fewer than model.block_size " +
                      std::to_string(shape.block_size));
  }
  const std::string activation = config.value("activation_function", std::string("gelu_new"));
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh") {
    throw ConfigError(where + " has activation_function \"" + activation +
                      "\"; \"gpt\" computes GELU's tanh form (\"gelu_new\")");
  }
  if (config.contains("n_inner") && !config.at("n_inner").is_null() && config.at("n_inner") != 4 * shape.n_embd) {
    throw ConfigError(where + " has n_inner " + config.at("n_inner").dump() + "; \"gpt\"'s MLP is 4 n_embd wide");
  }
  if (config.contains("layer_norm_epsilon") && config.at("layer_norm_epsilon") != kLayerNormEps) {
    throw ConfigError(where + " has layer_norm_epsilon " + config.at("layer_norm_epsilon").dump() + "; \"gpt\" uses 1e-5");
  }
  if (!config.value("tie_word_embeddings", true)) {
    throw ConfigError(where + " unties the head from wte (tie_word_embeddings false); \"gpt\" ties them");
  }
  // Attention as GPT-2 scales it: by 1/sqrt(head size), not by the layer's index too.
  if (!config.value("scale_attn_weights", true) || config.value("scale_attn_by_inverse_layer_idx", false)) {
    throw ConfigError(where + " scales attention otherwise (scale_attn_weights, scale_attn_by_inverse_layer_idx); "
                      "\"gpt\" divides by sqrt(head size), as GPT-2 does");
  }
  return size("n_positions");
}

// The sizes config.json gives, for the keys a config leaves out
// (core/model/pretrained_keys.h); block_size stays the data's window, and
// GPT-2's dropouts (*_pdrop) are not taken: "dropout" is 0 unless set.
[[maybe_unused]] const bool pretrained_keys_registered = [] {
  pretrained_keys_readers()["gpt"] = [](const std::string& dir) {
    const Json config = read_hugging_face_config(dir, "GPT-2");
    PretrainedKeys taken;
    for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size"}) {
      if (config.contains(key) && !config.at(key).is_null()) taken.keys[key] = config.at(key);
    }
    return taken;
  };
  return true;
}();

}  // namespace

NamedTensors read_hugging_face(const Gpt& model, const std::string& dir) {
  const Shape& shape = model.shape();
  const Json config = read_hugging_face_config(dir, "GPT-2");
  int64_t positions = 0;
  check_hugging_face_config(dir + "/config.json", [&] { positions = check_config_values(config, shape, dir + "/config.json"); });
  const std::string where = "config key 'init_from': '" + dir + "'";
  std::map<std::string, at::Tensor> mine;
  for (const auto& item : model.named_parameters(true)) mine.emplace(item.key(), item.value());
  NamedTensors tensors;
  at::Tensor head;
  for (auto& [stored, tensor] : read_safetensors_checkpoint(dir, "init_from")) {
    std::string name = stored.rfind(kPrefix, 0) == 0 ? stored.substr(kPrefix.size()) : stored;
    // GPT-2's causal mask buffers, which older checkpoints stored.
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;
    at::Tensor value = tensor.to(at::kFloat);
    if (name == "lm_head.weight") {
      head = value;
      continue;
    }
    if (conv1d(name)) {
      if (value.dim() != 2) throw ConfigError(where + ": tensor '" + stored + "' is not a matrix");
      value = value.t().contiguous();
    }
    if (name == "wpe.weight") {
      if (value.dim() != 2 || value.size(0) != positions) {
        throw ConfigError(where + ": tensor '" + stored + "' has shape " + c10::str(tensor.sizes()) +
                          ", and config.json's n_positions is " + std::to_string(positions));
      }
      value = value.slice(0, 0, shape.block_size).contiguous();  // the model's context may be shorter
    }
    if (!shape.bias && ends_with(name, ".bias")) {
      if (value.abs().max().item<double>() == 0) continue;  // what basin writes for a model without biases
      throw ConfigError(where + " has bias '" + stored + "', and the model has none (model.bias false); set model.bias true");
    }
    // A size that disagrees with config.json (which agrees with the model): name both.
    const auto found = mine.find(name);
    if (found != mine.end() && value.sizes() != found->second.sizes()) {
      throw ConfigError(where + ": tensor '" + stored + "' has shape " + c10::str(tensor.sizes()) +
                        ", and config.json's sizes (n_embd " + std::to_string(shape.n_embd) + ", vocab_size " +
                        std::to_string(shape.vocab_size) + ", n_positions >= " + std::to_string(shape.block_size) +
                        ") make it " + c10::str(conv1d(name) ? found->second.t().sizes() : found->second.sizes()));
    }
    tensors.emplace_back(name, value);
  }
  if (head.defined()) {
    const at::Tensor* wte = find_tensor(tensors, "wte.weight");
    if (wte == nullptr || !head.equal(*wte)) {
      throw ConfigError(where + "'s lm_head.weight differs from wte.weight; \"gpt\" ties the head to the token embedding");
    }
  }
  return tensors;
}

void write_hugging_face(Gpt& model, const std::string& dir) {
  const Shape& shape = model.shape();
  std::filesystem::create_directories(dir);
  NamedTensors tensors;
  for (auto& [name, value] : parameters_to_write(model, at::kFloat)) {
    if (conv1d(name)) value = value.t().contiguous();
    tensors.emplace_back(kPrefix + name, value.contiguous());
    // Without biases, zero ones (GPT-2 has one beside every weight but the embeddings'): the same function.
    if (!shape.bias && name != "wte.weight" && name != "wpe.weight") {
      const std::string bias = name.substr(0, name.size() - std::string("weight").size()) + "bias";
      tensors.emplace_back(kPrefix + bias, at::zeros({value.dim() == 1 ? value.size(0) : value.size(conv1d(name) ? 1 : 0)}));
    }
  }
  write_safetensors_file(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  const Json config{{"architectures", {"GPT2LMHeadModel"}},
                    {"model_type", "gpt2"},
                    {"vocab_size", shape.vocab_size},
                    {"n_positions", shape.block_size},
                    {"n_embd", shape.n_embd},
                    {"n_layer", shape.n_layer},
                    {"n_head", shape.n_head},
                    {"n_inner", nullptr},
                    {"activation_function", "gelu_new"},
                    {"resid_pdrop", shape.dropout},
                    {"embd_pdrop", shape.dropout},
                    {"attn_pdrop", shape.dropout},
                    {"layer_norm_epsilon", kLayerNormEps},
                    {"initializer_range", kInitStd},
                    {"tie_word_embeddings", true},
                    // A basin run has no special tokens: without these keys transformers takes GPT2Config's
                    // 50256, outside a byte-level model's 256 ids, and warns on every load.
                    {"bos_token_id", nullptr},
                    {"eos_token_id", nullptr},
                    {"torch_dtype", "float32"}};
  write_hugging_face_config(dir, config);
}

}  // namespace basin::gpt
