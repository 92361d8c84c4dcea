#pragma once
// Where in a tokenizer.json a component was read from, so that whatever is
// refused names the file and the key path ("pre_tokenizer.pretokenizers[1]").
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "basin/core/config/config_error.h"
#include "basin/tokenizer/unicode_text.h"

namespace basin::tokenizer {

/// A token id as tokenizer.json writes it: an integer in [0, 2^31).
inline bool is_token_id(const nlohmann::json& value) {
  return value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() <= INT32_MAX;
}

struct JsonPlace {
  std::string file;
  std::string path;  // empty at the root

  JsonPlace operator/(const std::string& key) const { return {file, path.empty() ? key : path + "." + key}; }
  JsonPlace operator[](std::size_t index) const { return {file, path + "[" + std::to_string(index) + "]"}; }

  /// A ConfigError naming the file and key: "'<file>': key 'k': <what>".
  [[nodiscard]] ConfigError error(const std::string& what) const {
    return ConfigError("tokenizer '" + file + "': key '" + (path.empty() ? std::string("(root)") : path) + "': " + what);
  }

  /// json[key], which must exist and be of the kind `is_kind` accepts (named `kind` in the error).
  template <typename IsKind>
  const nlohmann::json& child(const nlohmann::json& json, const std::string& key, IsKind is_kind, const char* kind) const {
    if (!json.is_object() || !json.contains(key)) throw (*this / key).error(std::string("missing; expected ") + kind);
    const nlohmann::json& value = json.at(key);
    if (!is_kind(value)) throw (*this / key).error(std::string("expected ") + kind + ", got " + value.dump().substr(0, 80));
    return value;
  }
  std::string string(const nlohmann::json& json, const std::string& key) const {
    return child(json, key, [](const nlohmann::json& v) { return v.is_string(); }, "a string").get<std::string>();
  }
  bool boolean(const nlohmann::json& json, const std::string& key, bool fallback) const {
    if (!json.contains(key) || json.at(key).is_null()) return fallback;
    return child(json, key, [](const nlohmann::json& v) { return v.is_boolean(); }, "true or false").get<bool>();
  }
  /// json[key], which tokenizers reads as one char.
  std::string character(const nlohmann::json& json, const std::string& key) const {
    const std::string text = string(json, key);
    if (!is_one_code_point(text)) throw (*this / key).error("'" + text + "' is not one character");
    return text;
  }
  /// The component's "type".
  std::string type(const nlohmann::json& json) const { return string(json, "type"); }

  /// A Sequence's components: json[key]'s items, each made by `make(item, place)`, in order.
  template <typename Make>
  auto sequence(const nlohmann::json& json, const std::string& key, Make make) const {
    const nlohmann::json& items = child(json, key, [](const nlohmann::json& v) { return v.is_array(); }, "a list");
    std::vector<decltype(make(items, *this))> steps;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_object()) throw (*this / key)[i].error("expected a component, got " + items[i].dump().substr(0, 80));
      steps.push_back(make(items[i], (*this / key)[i]));
    }
    return steps;
  }
};

}  // namespace basin::tokenizer
