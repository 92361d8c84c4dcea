// The strict JSON reading of config text (UTF-8, depth, numbers, duplicate
// keys), each failure saying where it is.
#include "basin/core/config/config_text.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "basin/core/config/config_error.h"

namespace basin {
namespace config_text {

std::string clip(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return text.substr(0, cut) + "...";
}

std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? clip(key) : path + "." + clip(key);
}

std::string append_path(const std::string& path, const std::string& tail) {
  if (path.empty() || tail.empty()) return path + tail;
  return tail[0] == '[' ? path + tail : path + "." + tail;
}

std::string short_dump(const Json& value) {
  // Strings built by a library user need not be UTF-8; the loaders check theirs.
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
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

std::string describe(const JsonFailure& failure, const std::string& key) {
  if (failure.kind == JsonFailure::Kind::kDuplicateKey) return "config key '" + key + "' " + failure.reason;
  return (key.empty() ? std::string() : "config key '" + key + "': ") + failure.reason;
}

}  // namespace config_text

}  // namespace basin
