#include "basin/tokenizer/unicode_text.h"

#include "basin/core/config/config_error.h"

namespace basin::tokenizer {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

// How many bytes of the ill-formed sequence at text[pos] one U+FFFD stands
// for: the longest prefix that could still have begun a well-formed sequence
// (Unicode's "maximal subpart"), at least one byte.
std::size_t maximal_subpart(std::string_view text, std::size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  else if (lead == 0xE0) { length = 3; low = 0xA0; }
  else if (lead == 0xED) { length = 3; high = 0x9F; }
  else if (lead >= 0xE1 && lead <= 0xEF) length = 3;
  else if (lead == 0xF0) { length = 4; low = 0x90; }
  else if (lead >= 0xF1 && lead <= 0xF3) length = 4;
  else if (lead == 0xF4) { length = 4; high = 0x8F; }
  else return 1;
  std::size_t taken = 1;
  for (; taken < length && pos + taken < text.size(); ++taken) {
    const auto c = static_cast<unsigned char>(text[pos + taken]);
    const unsigned char lo = taken == 1 ? low : 0x80, hi = taken == 1 ? high : 0xBF;
    if (c < lo || c > hi) break;
  }
  return taken;
}

}  // namespace

char32_t next_code_point(std::string_view text, std::size_t& pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) {
    ++pos;
    return lead;
  }
  const std::size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  char32_t code_point = lead & (0x7F >> length);
  for (std::size_t i = 1; i < length; ++i) code_point = (code_point << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  pos += length;
  return code_point;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size();) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const std::size_t length = utf8_sequence_length(text, pos);
    if (length == 0) return pos;
    pos += length;
  }
  return std::nullopt;
}

std::string utf8_lossy(std::string_view bytes) {
  if (!first_invalid_utf8(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  for (std::size_t pos = 0; pos < bytes.size();) {
    const std::size_t length = utf8_sequence_length(bytes, pos);
    if (length > 0) {
      out.append(bytes.substr(pos, length));
      pos += length;
    } else {
      append_utf8(out, kReplacement);
      pos += maximal_subpart(bytes, pos);
    }
  }
  return out;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  std::size_t at = 0;
  for (std::size_t found; (found = text.find(from, at)) != std::string_view::npos; at = found + from.size()) {
    out.append(text.substr(at, found - at)).append(to);
  }
  return out.append(text.substr(at));
}

bool is_one_code_point(std::string_view text) {
  if (text.empty() || first_invalid_utf8(text)) return false;
  std::size_t pos = 0;
  next_code_point(text, pos);
  return pos == text.size();
}

}  // namespace basin::tokenizer
