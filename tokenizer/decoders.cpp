#include "basin/tokenizer/decoders.h"

#include "basin/tokenizer/byte_level.h"
#include "basin/tokenizer/unicode_text.h"

namespace basin::tokenizer {
namespace {

class ByteLevel final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
    std::string bytes, token_bytes;
    for (const std::string& token : tokens) {
      // A token with a code point outside the alphabet (an added token, say) stands for its own UTF-8.
      token_bytes.clear();
      bool all = true;
      for (std::size_t pos = 0; pos < token.size() && all;) {
        const auto byte = alphabet.byte_of(next_code_point(token, pos));
        if (byte) token_bytes += static_cast<char>(*byte);
        all = byte.has_value();
      }
      bytes += all ? token_bytes : token;
    }
    return {utf8_lossy(bytes)};
  }
};

class Replace final : public Decoder {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) token = replace_all(token, from_, to_);
    return tokens;
  }

 private:
  std::string from_, to_;
};

// <0xXX> tokens become their bytes: the text they form where it is UTF-8, one U+FFFD per byte where not.
class ByteFallback final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    const auto flush = [&] {
      if (bytes.empty()) return;
      if (!first_invalid_utf8(bytes)) out.push_back(bytes);
      else for (std::size_t i = 0; i < bytes.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      bytes.clear();
    };
    for (std::string& token : tokens) {
      const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' && hex(token[3]) && hex(token[4])) {
        bytes += static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    return out;
  }
};

class Fuse final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    return {joined};
  }
};

// Up to `start` copies of `content` off each token's start, `stop` off its end.
class Strip final : public Decoder {
 public:
  Strip(std::string content, std::size_t start, std::size_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) {
      for (std::size_t i = 0; i < start_ && token.compare(0, content_.size(), content_) == 0; ++i) token.erase(0, content_.size());
      for (std::size_t i = 0; i < stop_ && token.size() >= content_.size() &&
                              token.compare(token.size() - content_.size(), content_.size(), content_) == 0; ++i) {
        token.resize(token.size() - content_.size());
      }
    }
    return tokens;
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

// The replacement becomes a space again; the first token loses its replacements where one was prepended.
class Metaspace final : public Decoder {
 public:
  Metaspace(std::string replacement, bool prepended) : replacement_(std::move(replacement)), prepended_(prepended) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = replace_all(tokens[i], replacement_, i == 0 && prepended_ ? "" : " ");
    return tokens;
  }

 private:
  std::string replacement_;
  bool prepended_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_) tokens = step->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

std::string pattern_string(const nlohmann::json& json, const JsonPlace& place) {
  const auto& pattern = place.child(json, "pattern", [](const nlohmann::json& v) { return v.is_object() && v.contains("String"); },
                                    "{\"String\": ...}");
  const std::string from = (place / "pattern").string(pattern, "String");
  if (from.empty()) throw (place / "pattern").error("the string to replace is empty");
  return from;
}

std::size_t count(const nlohmann::json& json, const JsonPlace& place, const char* key) {
  return place.child(json, key, [](const nlohmann::json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; }, "a count").get<std::size_t>();
}

}  // namespace

std::unique_ptr<Decoder> decoder_from_json(const nlohmann::json& json, const JsonPlace& place) {
  if (json.is_null()) return nullptr;
  const std::string type = place.type(json);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Replace") return std::make_unique<Replace>(pattern_string(json, place), place.string(json, "content"));
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    return std::make_unique<Strip>(place.character(json, "content"), count(json, place, "start"), count(json, place, "stop"));
  }
  if (type == "Metaspace") {
    bool prepended = place.boolean(json, "add_prefix_space", true);
    if (json.contains("prepend_scheme")) {
      const std::string scheme = place.string(json, "prepend_scheme");
      if (scheme != "always" && scheme != "first" && scheme != "never") {
        throw (place / "prepend_scheme").error("'" + scheme + "' is none of always, first, never");
      }
      prepended = scheme != "never";
    }
    return std::make_unique<Metaspace>(place.character(json, "replacement"), prepended);
  }
  if (type == "Sequence") return std::make_unique<Sequence>(place.sequence(json, "decoders", decoder_from_json));
  throw (place / "type").error("decoder '" + type + "' is not supported (basin reads ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence)");
}

}  // namespace basin::tokenizer
