#include "basin/models/hugging_face_files.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <torch/nn/module.h>

#include "basin/core/config/config_error.h"

namespace basin {

Json read_hugging_face_config(const std::string& dir, const std::string& layout) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) {
    throw ConfigError("config key 'init_from': '" + path + "' cannot be read; a Hugging Face " + layout +
                      " directory holds config.json and model.safetensors");
  }
  try {
    Json config = Json::parse(in);
    if (!config.is_object()) throw std::runtime_error("not a JSON object");
    return config;
  } catch (const std::exception& error) {
    throw ConfigError("config key 'init_from': '" + path + "' is not a JSON object: " + error.what());
  }
}

NamedTensors parameters_to_write(torch::nn::Module& model, at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  NamedTensors tensors;
  for (const auto& item : model.named_parameters(true)) {
    tensors.emplace_back(item.key(), item.value().detach().to(at::kCPU, dtype));
  }
  return tensors;
}

void check_hugging_face_config(const std::string& path, const std::function<void()>& check) {
  try {
    check();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& error) {
    throw ConfigError("config key 'init_from': '" + path + "' has a value of an unexpected type: " + error.what());
  }
}

void write_hugging_face_config(const std::string& dir, const Json& config) {
  const std::string path = dir + "/config.json";
  {
    std::ofstream out(path + ".tmp");
    out << config.dump(2) << "\n";
    out.flush();
    if (!out) throw std::runtime_error("cannot write '" + path + ".tmp'");
  }
  std::filesystem::rename(path + ".tmp", path);
}

}  // namespace basin
