#include "basin/core/serialization/safetensors_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "basin/core/config/config_error.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

constexpr std::uintmax_t kMaxIndexBytes = 100 << 20;  // a safetensors header's own limit
constexpr std::size_t kMaxEntries = 1 << 20;           // as many tensors as one file may hold
constexpr int kMaxDepth = 3;                            // {"weight_map": {name: file}, "metadata": {...}}

/// The index's JSON: plain nlohmann::json (a std::map: the insertion-ordered
/// Json would scan its keys on every insert, quadratic in a large index).
using Index = nlohmann::json;

/// An untrusted name or value in a message: short.
std::string shown(const std::string& text) {
  return "'" + (text.size() <= 80 ? text : text.substr(0, 80) + "...") + "'";
}

bool is_file(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);  // false for what cannot be asked too (a name too long, a loop of links)
}

/// The index's weight_map, checked to be names of files inside the directory.
std::map<std::string, std::string> weight_map(const std::string& index, const std::string& where) {
  std::error_code error;
  const std::uintmax_t bytes = fs::file_size(index, error);
  if (error) throw ConfigError(where + " cannot be read: " + error.message());
  if (bytes > kMaxIndexBytes) {
    throw ConfigError(where + " is " + std::to_string(bytes) + " bytes; an index is at most 100 MiB");
  }
  std::ifstream in(index, std::ios::binary);
  std::string text(static_cast<std::size_t>(bytes), '\0');
  if (!in || !in.read(text.data(), static_cast<std::streamsize>(bytes))) throw ConfigError(where + " cannot be read");
  Index parsed;
  try {
    parsed = Index::parse(text, [](int depth, Index::parse_event_t, Index&) {
      if (depth > kMaxDepth) throw std::length_error("nested deeper than an index is");
      return true;
    });
  } catch (const std::exception& parse_error) {
    throw ConfigError(where + " is not an index's JSON: " + parse_error.what());
  }
  if (!parsed.is_object() || !parsed.contains("weight_map") || !parsed.at("weight_map").is_object()) {
    throw ConfigError(where + " has no \"weight_map\" object (tensor name -> file name)");
  }
  const Index& map = parsed.at("weight_map");
  if (map.empty() || map.size() > kMaxEntries) {
    throw ConfigError(where + " maps " + std::to_string(map.size()) + " tensors to files; expected 1 to " +
                      std::to_string(kMaxEntries));
  }
  std::map<std::string, std::string> files;
  for (const auto& [name, file] : map.items()) {
    if (!file.is_string()) throw ConfigError(where + " maps tensor " + shown(name) + " to no file name");
    const std::string shard = file.get<std::string>();
    const fs::path path(shard);
    if (shard.empty() || shard.find('\0') != std::string::npos || path.has_parent_path() || path.is_absolute() ||
        shard == "." || shard == "..") {
      throw ConfigError(where + " maps tensor " + shown(name) + " to " + shown(shard) +
                        ", which is not a file of the checkpoint's own directory");
    }
    files.emplace(name, shard);
  }
  return files;
}

}  // namespace

NamedTensors read_safetensors_checkpoint(const std::string& dir, const std::string& key) {
  // transformers' order: the whole file where there is one, else the index.
  const fs::path whole = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (is_file(whole) || !is_file(index)) return read_safetensors_file(whole.string(), key);
  const std::string where = "config key '" + key + "': '" + index.string() + "'";
  const std::map<std::string, std::string> files = weight_map(index.string(), where);
  std::set<std::string> shards;
  for (const auto& [name, shard] : files) shards.insert(shard);
  for (const std::string& shard : shards) {
    if (!is_file(fs::path(dir) / shard)) {
      throw ConfigError(where + " names file " + shown(shard) + ", which is no file of " + shown(dir));
    }
  }
  std::map<std::string, at::Tensor> found;
  for (const std::string& shard : shards) {
    for (auto& [name, tensor] : read_safetensors_file((fs::path(dir) / shard).string(), key)) {
      const auto listed = files.find(name);
      if (listed == files.end() || listed->second != shard) {
        throw ConfigError(where + ": tensor " + shown(name) + " is in " + shown(shard) + ", and the index " +
                          (listed == files.end() ? "names no file for it" : "puts it in " + shown(listed->second)));
      }
      found.emplace(name, std::move(tensor));  // names are unique in a file, and each is listed in one file
    }
  }
  NamedTensors tensors;
  for (const auto& [name, shard] : files) {
    const auto tensor = found.find(name);
    if (tensor == found.end()) {
      throw ConfigError(where + " puts tensor " + shown(name) + " in " + shown(shard) + ", which lacks it");
    }
    tensors.emplace_back(name, tensor->second);
  }
  return tensors;
}

}  // namespace basin
