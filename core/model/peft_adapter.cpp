#include "basin/core/model/peft_adapter.h"

#include <filesystem>
#include <fstream>
#include <map>

#include "basin/core/config/config_error.h"
#include "basin/core/config/config_file.h"
#include "basin/core/model/model.h"
#include "basin/core/serialization/safetensors_file.h"

namespace basin {
namespace {

const std::string kConfigFile = "adapter_config.json";
const std::string kWeightsFile = "adapter_model.safetensors";
const std::string kPrefix = "base_model.model.";

}  // namespace

void write_peft_adapter(Model& model, const LoraOptions& options, const std::string& base, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  NamedTensors tensors;
  Json targets = Json::array();
  for (auto& [name, layer] : adapted_layers(model)) {
    const std::string module = kPrefix + model.hugging_face_module(name);
    tensors.emplace_back(module + ".lora_A.weight", layer->lora_A->weight.detach().to(at::kCPU, at::kFloat).contiguous());
    tensors.emplace_back(module + ".lora_B.weight", layer->lora_B->weight.detach().to(at::kCPU, at::kFloat).contiguous());
    targets.push_back(model.hugging_face_module(name));
  }
  write_safetensors_file((fs::path(dir) / kWeightsFile).string(), tensors, {{"format", "pt"}});
  const Json config{{"peft_type", "LORA"},
                    {"task_type", "CAUSAL_LM"},
                    {"base_model_name_or_path", base.empty() ? Json(nullptr) : Json(base)},
                    {"r", options.r},
                    {"lora_alpha", options.alpha},
                    {"lora_dropout", options.dropout},
                    {"target_modules", targets},
                    {"fan_in_fan_out", model.hugging_face_transposes_projections()},
                    {"bias", "none"},
                    {"use_rslora", options.rslora},
                    {"init_lora_weights", options.init == LoraInit::kGaussian ? Json("gaussian") : Json(true)},
                    {"modules_to_save", nullptr},
                    {"inference_mode", true}};
  const fs::path path = fs::path(dir) / kConfigFile;
  const fs::path partial = path.string() + ".partial";
  {
    std::ofstream out(partial);
    out << config.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write '" + partial.string() + "'");
  }
  fs::rename(partial, path);
}

void read_peft_adapter(Model& model, const LoraOptions& options, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string where = "config key 'adapters.lora.init_from': '" + dir + "'";
  const fs::path config_path = fs::path(dir) / kConfigFile;
  const fs::path weights_path = fs::path(dir) / kWeightsFile;
  if (!fs::is_regular_file(config_path) || !fs::is_regular_file(weights_path)) {
    throw ConfigError(where + " is no PEFT adapter directory: expected " + kConfigFile + " and " + kWeightsFile +
                      " in it (what a run writes to adapter/, or PEFT's save_pretrained)");
  }
  const Json config = load_config_file(config_path.string());
  const auto expect = [&](const std::string& key, const Json& wanted) {
    if (!config.contains(key) || config[key] != wanted) {
      throw ConfigError(where + ": " + kConfigFile + " has \"" + key + "\": " +
                        (config.contains(key) ? config[key].dump() : std::string("nothing")) + ", expected " +
                        wanted.dump() + " (as the config's adapters.lora says)");
    }
  };
  expect("peft_type", "LORA");
  expect("r", options.r);
  expect("lora_alpha", options.alpha);
  if (config.contains("use_rslora") || options.rslora) expect("use_rslora", options.rslora);  // older files lack it
  expect("fan_in_fan_out", model.hugging_face_transposes_projections());
  std::map<std::string, at::Tensor> stored;
  for (auto& [name, tensor] : read_safetensors_file(weights_path.string(), "adapters.lora.init_from")) {
    // PEFT saves without the adapter's name; a file of a named adapter carries it ("lora_A.default.weight").
    std::string key = name;
    for (const std::string infix : {".lora_A.", ".lora_B."}) {
      const auto at = key.find(infix);
      if (at != std::string::npos && key.compare(at + infix.size(), 7, "weight") != 0) {
        const auto dot = key.find('.', at + infix.size());
        if (dot != std::string::npos) key = key.substr(0, at + infix.size()) + key.substr(dot + 1);
      }
    }
    stored.emplace(key, tensor);
  }
  at::NoGradGuard no_grad;
  for (auto& [name, layer] : adapted_layers(model)) {
    const std::string module = kPrefix + model.hugging_face_module(name);
    for (auto [matrix, part] : {std::pair{layer->lora_A, "lora_A"}, std::pair{layer->lora_B, "lora_B"}}) {
      const std::string key = module + "." + part + ".weight";
      const auto found = stored.find(key);
      if (found == stored.end()) {
        throw ConfigError(where + ": " + kWeightsFile + " has no '" + key + "', which the adapted layer '" + name +
                          "' needs (adapters.lora.targets adapts more than the file holds)");
      }
      if (!found->second.sizes().equals(matrix->weight.sizes())) {
        throw ConfigError(where + ": " + kWeightsFile + "'s '" + key + "' is " + c10::str(found->second.sizes()) +
                          ", the layer's is " + c10::str(matrix->weight.sizes()));
      }
      matrix->weight.detach().copy_(found->second);
      stored.erase(found);
    }
  }
  if (!stored.empty()) {
    throw ConfigError(where + ": " + kWeightsFile + "'s '" + stored.begin()->first + "' adapts no layer that "
                      "adapters.lora.targets matches");
  }
}

}  // namespace basin
