#include "basin/tokenizer/normalizers.h"

#include <cstdlib>
#include <vector>

#include <utf8proc.h>

#include "basin/tokenizer/tokenizers_unicode.h"
#include "basin/tokenizer/unicode_text.h"

namespace basin::tokenizer {
namespace {

class UnicodeNormalForm final : public Normalizer {
 public:
  explicit UnicodeNormalForm(utf8proc_option_t options) : options_(options) {}
  std::string normalize(std::string_view text) const override {
    // Plain ASCII is in every normal form already.
    bool ascii = true;
    for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii) return std::string(text);
    // tokenizers' tables are Unicode 9.0's: a code point that normalizes only
    // since then stays as it is there, and as it neither reorders nor
    // composes with its neighbours, the text on either side of it normalizes
    // alone.
    std::string out;
    std::size_t segment = 0;
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t begin = pos;
      const char32_t c = next_code_point(text, pos);
      if (!is_normalized_only_since_unicode_9(c)) continue;
      append_mapped(text.substr(segment, begin - segment), out);
      out.append(text.substr(begin, pos - begin));
      segment = pos;
    }
    append_mapped(text.substr(segment), out);
    return out;
  }

 private:
  void append_mapped(std::string_view text, std::string& out) const {
    if (text.empty()) return;
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t length = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                                 static_cast<utf8proc_ssize_t>(text.size()), &mapped, options_);
    if (length < 0) throw std::runtime_error(std::string("utf8proc: ") + utf8proc_errmsg(length));
    out.append(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(length));
    std::free(mapped);
  }

  utf8proc_option_t options_;
};

// Each code point lowercased alone, as tokenizers' Lowercase: Σ is σ even where it ends a word.
class Lowercase final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
      const char c = text[pos];
      if (static_cast<unsigned char>(c) < 0x80) {
        out += c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
        ++pos;
      } else {
        append_lowercase(out, next_code_point(text, pos));
      }
    }
    return out;
  }
};

// Whitespace (Unicode's White_Space, as Rust's char::is_whitespace) taken off either end.
class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      for (std::size_t pos = 0; pos < end && is_whitespace(next_code_point(text, pos));) begin = pos;
    }
    if (right_) {
      while (end > begin) {
        std::size_t last = end - 1;
        while (last > begin && (static_cast<unsigned char>(text[last]) & 0xC0) == 0x80) --last;  // a continuation byte
        std::size_t pos = last;
        if (!is_whitespace(next_code_point(text, pos))) break;
        end = last;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }

 private:
  bool left_, right_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    return text.empty() ? std::string() : prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::string normalize(std::string_view text) const override { return replace_all(text, from_, to_); }

 private:
  std::string from_, to_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string out(text);
    for (const auto& step : steps_) out = step->normalize(out);
    return out;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> normalizer_from_json(const nlohmann::json& json, const JsonPlace& place) {
  if (json.is_null()) return nullptr;
  const std::string type = place.type(json);
  const auto stable = static_cast<utf8proc_option_t>(UTF8PROC_STABLE);
  if (type == "NFC") return std::make_unique<UnicodeNormalForm>(static_cast<utf8proc_option_t>(stable | UTF8PROC_COMPOSE));
  if (type == "NFD") return std::make_unique<UnicodeNormalForm>(static_cast<utf8proc_option_t>(stable | UTF8PROC_DECOMPOSE));
  if (type == "NFKC") {
    return std::make_unique<UnicodeNormalForm>(static_cast<utf8proc_option_t>(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeNormalForm>(static_cast<utf8proc_option_t>(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") {
    // tokenizers requires both keys.
    const auto flag = [&](const char* key) {
      return place.child(json, key, [](const nlohmann::json& v) { return v.is_boolean(); }, "true or false").get<bool>();
    };
    return std::make_unique<Strip>(flag("strip_left"), flag("strip_right"));
  }
  if (type == "Prepend") return std::make_unique<Prepend>(place.string(json, "prepend"));
  if (type == "Replace") {
    const nlohmann::json& pattern = place.child(json, "pattern", [](const nlohmann::json& v) { return v.is_object(); }, "an object");
    if (!pattern.contains("String")) throw (place / "pattern").error("only a {\"String\": ...} pattern is supported here, not " + pattern.dump().substr(0, 80));
    const std::string from = (place / "pattern").string(pattern, "String");
    if (from.empty()) throw (place / "pattern").error("the string to replace is empty");
    return std::make_unique<Replace>(from, place.string(json, "content"));
  }
  if (type == "Sequence") return std::make_unique<Sequence>(place.sequence(json, "normalizers", normalizer_from_json));
  throw (place / "type").error("normalizer '" + type + "' is not supported (basin reads NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace and Sequence)");
}

}  // namespace basin::tokenizer
