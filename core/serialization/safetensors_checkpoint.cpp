#include "basin/core/serialization/safetensors_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <cctype>
#include <cstdio>
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

namespace {

std::string shard_name(std::size_t index, std::size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index, count);
  return name;
}

// What either layout leaves: the whole file, the index and the numbered files.
void remove_earlier_export(const fs::path& dir) {
  std::error_code error;
  for (const char* name : {"model.safetensors", "model.safetensors.index.json"}) fs::remove(dir / name, error);
  if (!fs::is_directory(dir, error)) return;
  const auto numbered = [](const std::string& name) {  // model-00001-of-00003.safetensors
    const std::string shape = "model-#####-of-#####.safetensors";
    if (name.size() != shape.size()) return false;
    for (std::size_t i = 0; i < name.size(); ++i) {
      if (shape[i] == '#' ? !std::isdigit(static_cast<unsigned char>(name[i])) : name[i] != shape[i]) return false;
    }
    return true;
  };
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (numbered(entry.path().filename().string())) fs::remove(entry.path(), error);
  }
}

}  // namespace

void write_safetensors_checkpoint(const std::string& dir, const NamedTensors& tensors, std::uintmax_t max_shard_bytes,
                                  const std::map<std::string, std::string>& metadata) {
  fs::create_directories(dir);
  remove_earlier_export(dir);
  std::vector<NamedTensors> shards(1);
  std::uintmax_t total = 0, in_shard = 0;
  for (const auto& named : tensors) {
    const auto bytes = static_cast<std::uintmax_t>(named.second.nbytes());
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(named);
    in_shard += bytes, total += bytes;
  }
  if (shards.size() == 1) return write_safetensors_file(dir + "/model.safetensors", tensors, metadata);
  Index index{{"metadata", {{"total_size", total}}}, {"weight_map", Index::object()}};
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_name(i + 1, shards.size());
    write_safetensors_file(dir + "/" + name, shards[i], metadata);
    for (const auto& named : shards[i]) index["weight_map"][named.first] = name;
  }
  // The index last, and whole: a reader finds either no index or every file it names.
  const std::string path = dir + "/model.safetensors.index.json", partial = path + ".partial";
  std::ofstream(partial) << index.dump(2) << "\n";
  std::error_code error;
  fs::rename(partial, path, error);
  if (error) throw std::runtime_error("writing '" + path + "' failed: " + error.message());
}

std::uintmax_t parse_byte_size(const std::string& text) {
  std::size_t used = 0;
  double number = -1;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  static const std::map<std::string, double> units{{"", 1},      {"B", 1},          {"KB", 1e3},        {"MB", 1e6},
                                                   {"GB", 1e9},  {"TB", 1e12},      {"KIB", 1024.0},    {"MIB", 1048576.0},
                                                   {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const auto found = units.find(unit);
  if (used == 0 || found == units.end() || !(number > 0) || number * found->second < 1 || number * found->second > 1e18) {
    throw std::invalid_argument("'" + text + "' is no size; expected bytes, or a number with KB, MB, GB (powers of 1000) or KiB, MiB, GiB");
  }
  return static_cast<std::uintmax_t>(number * found->second);
}

}  // namespace basin
