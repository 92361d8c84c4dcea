#include "basin/core/serialization/safetensors_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "basin/core/config/config_error.h"
#include "basin/core/config/json.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

/// The index's weight_map, checked to be names of files inside the directory.
std::map<std::string, std::string> weight_map(const std::string& index, const std::string& where) {
  std::ifstream in(index);
  if (!in) throw ConfigError(where + " cannot be read");
  Json parsed;
  try {
    parsed = Json::parse(in);
  } catch (const std::exception& error) {
    throw ConfigError(where + " is not JSON: " + error.what());
  }
  if (!parsed.is_object() || !parsed.contains("weight_map") || !parsed.at("weight_map").is_object()) {
    throw ConfigError(where + " has no \"weight_map\" object (tensor name -> file name)");
  }
  std::map<std::string, std::string> files;
  for (const auto& [name, file] : parsed.at("weight_map").items()) {
    if (!file.is_string()) throw ConfigError(where + " maps tensor '" + name + "' to " + file.dump() + ", not a file name");
    const std::string shard = file.get<std::string>();
    const fs::path path(shard);
    if (shard.empty() || path.has_parent_path() || path.is_absolute() || shard == "." || shard == "..") {
      throw ConfigError(where + " maps tensor '" + name + "' to '" + shard +
                        "', which is not a file of the checkpoint's own directory");
    }
    files.emplace(name, shard);
  }
  if (files.empty()) throw ConfigError(where + " maps no tensor to a file");
  return files;
}

}  // namespace

NamedTensors read_safetensors_checkpoint(const std::string& dir, const std::string& key) {
  const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
  if (!fs::exists(index)) return read_safetensors_file((fs::path(dir) / "model.safetensors").string(), key);
  const std::string where = "config key '" + key + "': '" + index + "'";
  const std::map<std::string, std::string> files = weight_map(index, where);
  std::set<std::string> shards;
  for (const auto& [name, shard] : files) shards.insert(shard);
  for (const std::string& shard : shards) {
    if (!fs::is_regular_file(fs::path(dir) / shard)) throw ConfigError(where + " names file '" + shard + "', which does not exist");
  }
  std::map<std::string, at::Tensor> found;
  for (const std::string& shard : shards) {
    for (auto& [name, tensor] : read_safetensors_file((fs::path(dir) / shard).string(), key)) {
      const auto listed = files.find(name);
      if (listed == files.end() || listed->second != shard) {
        throw ConfigError(where + ": tensor '" + name + "' is in '" + shard + "', and the index " +
                          (listed == files.end() ? "names no file for it" : "puts it in '" + listed->second + "'"));
      }
      if (!found.emplace(name, std::move(tensor)).second) {
        throw ConfigError(where + ": tensor '" + name + "' is twice in '" + shard + "'");
      }
    }
  }
  NamedTensors tensors;
  for (const auto& [name, shard] : files) {
    const auto tensor = found.find(name);
    if (tensor == found.end()) throw ConfigError(where + " puts tensor '" + name + "' in '" + shard + "', which lacks it");
    tensors.emplace_back(name, tensor->second);
  }
  return tensors;
}

}  // namespace basin
