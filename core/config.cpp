#include "basin/core/config.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace basin {

namespace {

std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string short_dump(const Json& value) {
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

std::string range_text(double min, double max) {
  const bool has_min = std::isfinite(min);
  const bool has_max = std::isfinite(max);
  std::ostringstream out;
  if (has_min && has_max) out << " in [" << min << ", " << max << "]";
  else if (has_min) out << " >= " << min;
  else if (has_max) out << " <= " << max;
  return out.str();
}

// "[json.exception.parse_error.101] parse error at line 3, column 8: syntax
// error while parsing value - unexpected ']'; last read: '...'" -> the reason alone.
std::string parse_error_reason(const std::string& what) {
  std::string reason = what;
  const auto column = reason.find("column ");
  if (column != std::string::npos) {
    const auto colon = reason.find(": ", column);
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
  }
  const auto last_read = reason.find("; last read: '");
  if (last_read != std::string::npos) {
    const auto end = reason.find("'; ", last_read + 14);
    reason.erase(last_read, end == std::string::npos ? std::string::npos : end + 1 - last_read);
  }
  return reason;
}

}  // namespace

Json parse_config_text(const std::string& text, const std::string& origin) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& error) {
    // nlohmann reports the 1-based byte it stopped at; people read line:column.
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i + 1 < error.byte && i < text.size(); ++i) {
      if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
    }
    throw ConfigError(origin + ":" + std::to_string(line) + ":" + std::to_string(column) +
                      ": not valid JSON (" + parse_error_reason(error.what()) + ")");
  }
}

Json load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("config file '" + path + "' cannot be opened");
  std::stringstream text;
  text << in.rdbuf();
  Json config = parse_config_text(text.str(), path);
  if (!config.is_object()) throw ConfigError("config file '" + path + "': expected a JSON object at the top level");
  return config;
}

void apply_override(Json& config, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set '" + assignment + "': expected KEY=VALUE, e.g. optimizer.lr=0.1");
  }
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  Json value;
  try {
    value = Json::parse(text);
  } catch (const Json::parse_error&) {
    value = text;  // bare words are strings: model.name=cnn
  }
  Json* node = &config;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) throw ConfigError("--set '" + assignment + "': empty key segment in '" + key + "'");
    if (!node->is_object()) {
      throw ConfigError("--set '" + assignment + "': '" + key.substr(0, start - 1) + "' is not an object");
    }
    if (dot == std::string::npos) {
      (*node)[part] = value;
      return;
    }
    node = &(*node)[part];
    if (node->is_null()) *node = Json::object();
    start = dot + 1;
  }
}

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
  throw ConfigError("config key '" + path_of(key) + "': expected " + expected + ", got " + short_dump(got));
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
  std::string expected = "an integer";
  if (min != std::numeric_limits<int64_t>::min()) expected += " >= " + std::to_string(min);
  if (max != std::numeric_limits<int64_t>::max()) expected += " <= " + std::to_string(max);
  if (!value->is_number_integer()) fail(key, expected, *value);
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
    if (!x.is_number_integer()) fail(key, "an array of integers", *value);
    out.push_back(x.get<int64_t>());
  }
  return out;
}

Params Params::object(const std::string& key) {
  const Json* value = find(key);
  if (value == nullptr) return Params(Json::object(), path_of(key));
  if (!value->is_object()) fail(key, "an object", *value);
  return Params(*value, path_of(key));
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
