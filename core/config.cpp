#include "basin/core/config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>

namespace basin {

namespace {

// A key as quoted in messages: a key of a megabyte must not make one.
std::string clip(const std::string& text, std::size_t max_bytes = 64) {
  if (text.size() <= max_bytes) return text;
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return text.substr(0, cut) + "...";
}

std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? clip(key) : path + "." + clip(key);
}

// "a.b" + "c[0]" or "[0].c": paths that are already clipped.
std::string append_path(const std::string& path, const std::string& tail) {
  if (path.empty() || tail.empty()) return path + tail;
  return tail[0] == '[' ? path + tail : path + "." + tail;
}

std::string short_dump(const Json& value) {
  // Strings built by a library user need not be UTF-8; the loaders check theirs.
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
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

// The first byte that is not UTF-8 and the first bracket that opens level
// max_depth + 1, in one pass: before nlohmann sees the text, so that its
// error ("invalid literal") never hides an encoding problem and no structure
// deeper than the limit is ever built.
JsonFailure prescan(const std::string& text, int max_depth) {
  JsonFailure failure;
  int depth = 0;
  bool in_string = false;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t length = utf8_sequence_length(text, pos);
    if (length == 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(text[pos]));
      failure.kind = JsonFailure::Kind::kUtf8;
      failure.offset = pos;
      failure.reason = "not valid UTF-8 (byte " + std::string(byte) + " at offset " + std::to_string(pos) + ")";
      return failure;
    }
    const char c = text[pos];
    if (in_string) {
      // An escaped '"' cannot close the string; a byte above ASCII after the
      // backslash is not skipped, so that it is checked for UTF-8 too.
      if (c == '\\' && pos + 1 < text.size() && static_cast<unsigned char>(text[pos + 1]) < 0x80) pos += 1;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        failure.kind = JsonFailure::Kind::kDepth;
        failure.offset = pos;
        failure.reason = "nested deeper than " + std::to_string(max_depth) + " levels";
        return failure;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    pos += length;
  }
  return failure;
}

// nlohmann's SAX interface, building the same ordered_json its own parser
// would while it tracks where it is (for messages), rejects a key given twice
// in one object, and keeps insertion linear: ordered_json's own operator[]
// searches the object, which makes an object of n keys cost n².
class ConfigBuilder {
 public:
  explicit ConfigBuilder(int max_depth) : max_depth_(max_depth) {}

  bool null() { return put(Json()); }
  bool boolean(bool value) { return put(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return put(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return put(Json(value)); }
  bool number_float(Json::number_float_t value, const Json::string_t&) { return put(Json(value)); }
  bool string(Json::string_t& value) { return put(Json(std::move(value))); }
  bool binary(Json::binary_t&) { return false; }  // JSON text has none
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(Json::string_t& key) {
    Frame& frame = frames_.back();
    if (!frame.keys.insert(key).second) {
      frame.key = key;
      return fail(JsonFailure::Kind::kDuplicateKey, JsonFailure::kUnknown, "appears twice in one object");
    }
    frame.key = std::move(key);
    return true;
  }

  bool parse_error(std::size_t position, const std::string& token, const Json::exception& error) {
    // position counts the bytes read, the offending one included.
    const std::size_t offset = position > 0 ? position - 1 : 0;
    if (error.id == 406) {  // out_of_range.406: a number beyond a double; point at its start
      return fail(JsonFailure::Kind::kNumber, position >= token.size() ? position - token.size() : 0,
                  "number " + clip(token, 40) + (token.size() > 40 ? " (" + std::to_string(token.size()) + " characters)" : "") +
                      " is outside the range of a double (about ±1.8e308)");
    }
    failure_.kind = JsonFailure::Kind::kSyntax;
    failure_.offset = offset;
    failure_.reason = "not valid JSON (" + parse_error_reason(error.what()) + ")";
    return false;
  }

  Json& root() { return root_; }
  const JsonFailure& failure() const { return failure_; }

 private:
  struct Frame {
    Json* container;
    std::string key;                // objects: the key whose value comes next
    std::set<std::string> keys;     // objects: the keys seen
  };

  bool put(Json value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return true;
    }
    Frame& frame = frames_.back();
    if (frame.container->is_array()) {
      frame.container->get_ref<Json::array_t&>().push_back(std::move(value));
    } else {
      // ordered_map derives from std::vector: appending skips the search
      // operator[] would do; key() has already refused duplicates.
      frame.container->get_ref<Json::object_t&>().emplace_back(frame.key, std::move(value));
    }
    return true;
  }

  bool open(Json container) {
    if (static_cast<int>(frames_.size()) >= max_depth_) {
      return fail(JsonFailure::Kind::kDepth, JsonFailure::kUnknown, "nested deeper than " + std::to_string(max_depth_) + " levels");
    }
    Json* child = nullptr;
    if (frames_.empty()) {
      root_ = std::move(container);
      child = &root_;
    } else {
      put(std::move(container));
      Json& parent = *frames_.back().container;
      child = parent.is_array() ? &parent.get_ref<Json::array_t&>().back()
                                : &parent.get_ref<Json::object_t&>().back().second;
    }
    frames_.push_back(Frame{child, "", {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  // The key path of the value being read: "optimizer.param_groups[1].lr".
  std::string path() const {
    std::string out;
    for (const Frame& frame : frames_) {
      if (frame.container->is_array()) {
        const std::size_t size = frame.container->size();
        // An inner frame's element is its last; the innermost one's is the next.
        out += "[" + std::to_string(&frame == &frames_.back() ? size : size - 1) + "]";
      } else {
        out = join_path(out, frame.key);
      }
    }
    return out;
  }

  bool fail(JsonFailure::Kind kind, std::size_t offset, const std::string& reason) {
    failure_.kind = kind;
    failure_.offset = offset;
    failure_.key = path();
    failure_.reason = reason;
    return false;
  }

  int max_depth_;
  Json root_;
  std::vector<Frame> frames_;
  JsonFailure failure_;
};

// Parses `text` as one JSON value no deeper than max_depth, or says why not.
Json parse_json(const std::string& text, int max_depth, JsonFailure& failure) {
  failure = prescan(text, max_depth);
  if (failure.kind != JsonFailure::Kind::kNone) return Json();
  ConfigBuilder builder(max_depth);
  const bool complete = Json::sax_parse(text, &builder);
  failure = builder.failure();
  if (!complete && failure.kind == JsonFailure::Kind::kNone) {
    failure.kind = JsonFailure::Kind::kSyntax;  // not reached: every stop records why
    failure.reason = "not valid JSON";
  }
  return failure.kind == JsonFailure::Kind::kNone ? std::move(builder.root()) : Json();
}

// "run.json:3:8" for the 0-based byte `offset` of `text`.
std::string line_and_column(const std::string& origin, const std::string& text, std::size_t offset) {
  if (offset == JsonFailure::kUnknown) return origin;
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
  }
  return origin + ":" + std::to_string(line) + ":" + std::to_string(column);
}

// Unsigned JSON integers above INT64_MAX are integers that int64_t cannot hold.
bool fits_int64(const Json& value) {
  return !value.is_number_unsigned() ||
         value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

// The failure's reason, with the key path `key` when it has one.
std::string describe(const JsonFailure& failure, const std::string& key) {
  if (failure.kind == JsonFailure::Kind::kDuplicateKey) return "config key '" + key + "' " + failure.reason;
  return (key.empty() ? std::string() : "config key '" + key + "': ") + failure.reason;
}

}  // namespace

Json parse_config_text(const std::string& text, const std::string& origin) {
  JsonFailure failure;
  Json config = parse_json(text, kMaxConfigDepth, failure);
  if (failure.kind != JsonFailure::Kind::kNone) {
    throw ConfigError(line_and_column(origin, text, failure.offset) + ": " + describe(failure, failure.key));
  }
  return config;
}

Json load_config_file(const std::string& path) {
  const std::string file = "config file '" + path + "'";
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) throw ConfigError(file + " is a directory, not a file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!in) throw ConfigError(file + " cannot be opened: " + std::strerror(errno));
  const std::string limit = std::to_string(kMaxConfigFileBytes >> 20) + " MiB";
  // A regular file says its size; a pipe or device is read up to the limit.
  const auto size = std::filesystem::file_size(path, error);
  if (!error && size > kMaxConfigFileBytes) {
    throw ConfigError(file + " is " + std::to_string(size) + " bytes; config files above " + limit + " are refused");
  }
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const std::size_t got = std::fread(buffer, 1, sizeof buffer, in.get());
    text.append(buffer, got);
    if (text.size() > kMaxConfigFileBytes) {
      throw ConfigError(file + " holds more than " + limit + "; config files above " + limit + " are refused");
    }
    if (got < sizeof buffer) break;
  }
  if (std::ferror(in.get())) throw ConfigError(file + " cannot be read: " + std::strerror(errno));
  Json config = parse_config_text(text, path);
  if (!config.is_object()) throw ConfigError(file + ": expected a JSON object at the top level");
  return config;
}

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
