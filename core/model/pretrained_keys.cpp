#include "basin/core/model/pretrained_keys.h"

#include <algorithm>
#include <filesystem>
#include <set>

namespace basin {

std::map<std::string, PretrainedKeysReader>& pretrained_keys_readers() {
  static std::map<std::string, PretrainedKeysReader> readers;
  return readers;
}

ResolvedModelKeys resolve_pretrained_keys(const std::string& model_name, const Json& model_keys, const std::string& init_from) {
  ResolvedModelKeys resolved{model_keys.is_null() ? Json::object() : model_keys, {}, ""};
  const auto reader = pretrained_keys_readers().find(model_name);
  std::error_code error;
  if (reader == pretrained_keys_readers().end() || init_from.empty() || !std::filesystem::is_directory(init_from, error) ||
      !resolved.keys.is_object()) {
    return resolved;
  }
  resolved.source = (std::filesystem::path(init_from) / "config.json").string();
  const PretrainedKeys given = reader->second(init_from);
  std::set<std::string> withheld;  // the groups of keys the config gives
  for (const std::vector<std::string>& group : given.groups) {
    const bool said = std::any_of(group.begin(), group.end(), [&](const std::string& key) { return resolved.keys.contains(key); });
    if (said) withheld.insert(group.begin(), group.end());
  }
  for (auto it = given.keys.begin(); it != given.keys.end(); ++it) {
    if (resolved.keys.contains(it.key()) || withheld.count(it.key()) != 0) continue;
    resolved.keys[it.key()] = it.value();
    resolved.taken.push_back(it.key());
  }
  return resolved;
}

}  // namespace basin
