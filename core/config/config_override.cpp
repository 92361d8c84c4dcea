// --set overrides: one `a.b.c=value` assignment applied to a config.
#include <limits>
#include <string>
#include <vector>

#include "basin/core/config/config_error.h"
#include "basin/core/config/config_file.h"
#include "basin/core/config/config_text.h"

namespace basin {

using namespace config_text;

void apply_override(Json& config, const std::string& assignment) {
  const std::string shown = "--set '" + clip(assignment, 80) + "'";
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(shown + ": expected KEY=VALUE, e.g. optimizer.lr=0.1");
  }
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (parts.back().empty()) throw ConfigError(shown + ": empty key segment in '" + clip(key) + "'");
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // UTF-8 alone: brackets in a key are characters, and a depth failure
  // found first would hide the encoding one.
  const JsonFailure key_check = prescan(key, std::numeric_limits<int>::max());
  if (key_check.kind == JsonFailure::Kind::kUtf8) throw ConfigError(shown + ": key is " + key_check.reason);
  if (static_cast<int>(parts.size()) > kMaxConfigDepth) {
    throw ConfigError(shown + ": key nested deeper than " + std::to_string(kMaxConfigDepth) + " levels");
  }
  // The value may nest only as deep as the key path leaves room for.
  JsonFailure failure;
  Json value = parse_json(text, kMaxConfigDepth - static_cast<int>(parts.size()), failure);
  if (failure.kind == JsonFailure::Kind::kSyntax) {
    value = text;  // bare words are strings: model.name=cnn
  } else if (failure.kind != JsonFailure::Kind::kNone) {
    if (failure.kind == JsonFailure::Kind::kDepth) {
      failure.reason = "key and value nested deeper than " + std::to_string(kMaxConfigDepth) + " levels";
    }
    throw ConfigError(shown + ": " + describe(failure, append_path(clip(key), failure.key)));
  }
  Json* node = &config;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!node->is_object()) {
      std::string parent;
      for (std::size_t j = 0; j < i; ++j) parent = join_path(parent, parts[j]);
      throw ConfigError(shown + ": '" + parent + "' is not an object");
    }
    if (i + 1 == parts.size()) {
      (*node)[parts[i]] = std::move(value);
      return;
    }
    node = &(*node)[parts[i]];
    if (node->is_null()) *node = Json::object();
  }
}

}  // namespace basin
