#pragma once

// The strict JSON reading that config files, --set overrides and Params
// share: basin's own, not an API.

#include <cstddef>
#include <string>

#include "basin/core/config/json.h"

namespace basin::config_text {

// Why a text is not an acceptable config value; `offset` is the 0-based byte
// the problem was found at (kUnknown: not known), `key` the key path inside
// the text ("" when none).
struct JsonFailure {
  enum class Kind { kNone, kSyntax, kUtf8, kDepth, kNumber, kDuplicateKey };
  static constexpr std::size_t kUnknown = std::string::npos;
  Kind kind = Kind::kNone;
  std::size_t offset = kUnknown;
  std::string key;
  std::string reason;
};

/// `text` clipped to `max_bytes` (at a character boundary, "..." added): a
/// key of a megabyte must not make a message of one.
std::string clip(const std::string& text, std::size_t max_bytes = 64);
/// "a.b" + "c": a key's path, the key clipped.
std::string join_path(const std::string& path, const std::string& key);
/// "a.b" + "c[0]" or "[0].c": paths that are already clipped.
std::string append_path(const std::string& path, const std::string& tail);
/// A value as shown in messages, at most 60 bytes.
std::string short_dump(const Json& value);
/// The first byte that is not UTF-8 and the first bracket deeper than `max_depth`.
JsonFailure prescan(const std::string& text, int max_depth);
/// Parses `text` as one JSON value no deeper than max_depth, or says why not.
Json parse_json(const std::string& text, int max_depth, JsonFailure& failure);
/// The failure's reason, with the key path `key` when it has one.
std::string describe(const JsonFailure& failure, const std::string& key);

}  // namespace basin::config_text
