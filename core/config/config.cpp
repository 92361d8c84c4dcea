// Params: a typed, validating view of one object of the config.
#include "basin/core/config/config.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "basin/core/config/config_text.h"

namespace basin {

namespace {

using namespace config_text;

std::string range_text(double min, double max) {
  const bool has_min = std::isfinite(min);
  const bool has_max = std::isfinite(max);
  std::ostringstream out;
  if (has_min && has_max) out << " in [" << min << ", " << max << "]";
  else if (has_min) out << " >= " << min;
  else if (has_max) out << " <= " << max;
  return out.str();
}

// Unsigned JSON integers above INT64_MAX are integers that int64_t cannot hold.
bool fits_int64(const Json& value) {
  return !value.is_number_unsigned() ||
         value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

}  // namespace

Params::Params(Json object, std::string path) : object_(std::move(object)), path_(std::move(path)) {
  if (object_.is_null()) object_ = Json::object();
  if (!object_.is_object()) {
    throw ConfigError((path_.empty() ? std::string("config") : path_) + ": expected an object, got " +
                      short_dump(object_));
  }
}

bool Params::has(const std::string& key) const { return object_.contains(key); }

std::string Params::path_of(const std::string& key) const { return join_path(path_, key); }

const Json* Params::find(const std::string& key) {
  read_.insert(key);
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

void Params::fail(const std::string& key, const std::string& expected, const Json& got) const {
  // A dotted key ("rope_scaling.factor", read from a raw object) is its first part's.
  const auto found = sources_.find(key.substr(0, key.find('.')));
  const std::string& source = found != sources_.end() ? found->second : source_;
  throw ConfigError("config key '" + path_of(key) + "': expected " + expected + ", got " + short_dump(got) +
                    (source.empty() ? "" : " (taken from '" + source + "')"));
}

double Params::number(const std::string& key, double fallback, double min, double max) {
  const Json* value = find(key);
  if (value == nullptr) return fallback;
  if (!value->is_number()) fail(key, "a number" + range_text(min, max), *value);
  const double x = value->get<double>();
  if (!(x >= min && x <= max)) fail(key, "a number" + range_text(min, max), *value);
  return x;
}

double Params::number(const std::string& key) {
  if (!has(key)) throw ConfigError("config key '" + path_of(key) + "' is required (a number)");
  return number(key, 0.0);
}

double Params::positive(const std::string& key, double fallback) {
  const Json* value = find(key);
  if (value == nullptr) return fallback;
  if (!value->is_number() || !(value->get<double>() > 0)) fail(key, "a number > 0", *value);
  return value->get<double>();
}

int64_t Params::integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  const Json* value = find(key);
  if (value == nullptr) return fallback;
  const bool has_min = min != std::numeric_limits<int64_t>::min();
  // An integer beyond int64_t is told the upper bound even when none was set:
  // get<int64_t>() would wrap it around to a negative number.
  const bool too_big = (value->is_number_integer() && !fits_int64(*value)) ||
                       (value->is_number_float() && std::fabs(value->get<double>()) >= 0x1p63);
  const bool has_max = max != std::numeric_limits<int64_t>::max() || too_big;
  std::string expected = "an integer";
  if (has_min && has_max) expected += " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  else if (has_min) expected += " >= " + std::to_string(min);
  else if (has_max) expected += " <= " + std::to_string(max);
  if (!value->is_number_integer() || too_big) fail(key, expected, *value);
  const int64_t x = value->get<int64_t>();
  if (x < min || x > max) fail(key, expected, *value);
  return x;
}

bool Params::boolean(const std::string& key, bool fallback) {
  const Json* value = find(key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) fail(key, "true or false", *value);
  return value->get<bool>();
}

std::string Params::string(const std::string& key, const std::string& fallback) {
  const Json* value = find(key);
  if (value == nullptr) return fallback;
  if (!value->is_string()) fail(key, "a string", *value);
  return value->get<std::string>();
}

std::string Params::string(const std::string& key) {
  if (!has(key)) throw ConfigError("config key '" + path_of(key) + "' is required (a string)");
  return string(key, "");
}

std::string Params::choice(const std::string& key, const std::string& fallback,
                           const std::vector<std::string>& choices) {
  const std::string value = string(key, fallback);
  for (const auto& c : choices) {
    if (c == value) return value;
  }
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  fail(key, "one of " + list, Json(value));
}

std::vector<double> Params::numbers(const std::string& key, const std::vector<double>& fallback) {
  const Json* value = find(key);
  if (value == nullptr) return fallback;
  if (!value->is_array()) fail(key, "an array of numbers", *value);
  std::vector<double> out;
  for (const auto& x : *value) {
    if (!x.is_number()) fail(key, "an array of numbers", *value);
    out.push_back(x.get<double>());
  }
  return out;
}

std::vector<int64_t> Params::integers(const std::string& key, const std::vector<int64_t>& fallback) {
  const Json* value = find(key);
  if (value == nullptr) return fallback;
  if (!value->is_array()) fail(key, "an array of integers", *value);
  std::vector<int64_t> out;
  for (const auto& x : *value) {
    if (!x.is_number_integer() || !fits_int64(x)) fail(key, "an array of integers", *value);
    out.push_back(x.get<int64_t>());
  }
  return out;
}

Params Params::object(const std::string& key) {
  const Json* value = find(key);
  if (value == nullptr) return Params(Json::object(), path_of(key));
  if (!value->is_object()) fail(key, "an object", *value);
  Params inner(*value, path_of(key));
  const auto found = sources_.find(key);
  inner.source_ = found != sources_.end() ? found->second : source_;
  return inner;
}

Json Params::array(const std::string& key) {
  const Json* value = find(key);
  if (value == nullptr) return Json::array();
  if (!value->is_array()) fail(key, "an array", *value);
  return *value;
}

Json Params::raw(const std::string& key) {
  const Json* value = find(key);
  return value == nullptr ? Json() : *value;
}

std::vector<std::string> Params::keys() const {
  std::vector<std::string> out;
  for (auto it = object_.begin(); it != object_.end(); ++it) out.push_back(it.key());
  return out;
}

void Params::claim(const std::string& key) { read_.insert(key); }

void Params::finish() const {
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (read_.count(it.key()) != 0) continue;
    std::string known;
    for (const auto& k : read_) known += (known.empty() ? "" : ", ") + k;
    throw ConfigError("config key '" + path_of(it.key()) + "' is not known" +
                      (known.empty() ? std::string() : "; known keys here: " + known));
  }
}

}  // namespace basin
