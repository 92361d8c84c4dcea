#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "basin/core/config/config_error.h"
#include "basin/core/config/config_file.h"
#include "basin/core/config/json.h"

namespace basin {

/// A typed, validating view of one JSON object of the config.
///
/// Every read names its full key path in errors ("optimizer.lr: expected a
/// number >= 0, got -1"), and `finish()` rejects keys nobody read, so a typo
/// in a config is an error instead of a silently ignored setting.
class Params {
 public:
  /// `path` is the key path of `object` ("" for the root).
  Params(Json object, std::string path);

  bool has(const std::string& key) const;
  /// Full key path of `key` inside this object, for messages.
  std::string path_of(const std::string& key) const;
  const std::string& path() const { return path_; }

  double number(const std::string& key, double fallback,
                double min = -std::numeric_limits<double>::infinity(),
                double max = std::numeric_limits<double>::infinity());
  double number(const std::string& key);  // required
  /// A number that must be > 0.
  double positive(const std::string& key, double fallback);

  int64_t integer(const std::string& key, int64_t fallback,
                  int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max());
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key, const std::string& fallback);
  std::string string(const std::string& key);  // required
  /// A string that must be one of `choices`.
  std::string choice(const std::string& key, const std::string& fallback,
                     const std::vector<std::string>& choices);
  std::vector<double> numbers(const std::string& key, const std::vector<double>& fallback);
  std::vector<int64_t> integers(const std::string& key, const std::vector<int64_t>& fallback);

  /// The object at `key` (empty when absent), as Params with the longer path.
  Params object(const std::string& key);
  /// The array at `key` (empty when absent); elements are marked as read.
  Json array(const std::string& key);
  /// The raw value at `key`, marked as read; null when absent.
  Json raw(const std::string& key);
  /// The whole object, as given.
  const Json& raw_object() const { return object_; }

  /// Keys in file order.
  std::vector<std::string> keys() const;
  /// Marks `key` as read without reading it (a section handled elsewhere).
  void claim(const std::string& key);

  /// Throws ConfigError for the first key that no read touched.
  void finish() const;

  /// Says that `key`'s value came from `source` (a file), not from the
  /// config as written: a failure on it, or on a key inside it, names both.
  void set_source(const std::string& key, const std::string& source) { sources_[key] = source; }

  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const Json& got) const;

 private:
  const Json* find(const std::string& key);

  Json object_;
  std::string path_;
  std::set<std::string> read_;
  std::map<std::string, std::string> sources_;  // set_source's
  std::string source_;                          // of the whole object, where it came from one
};

}  // namespace basin
