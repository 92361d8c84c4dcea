#pragma once

#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace basin {

/// Length of the well-formed UTF-8 sequence that starts at `text[pos]`, or 0
/// where the bytes there are not UTF-8: a stray continuation byte, an overlong
/// form, a surrogate, a code point above U+10FFFF, or a sequence cut short.
inline std::size_t utf8_sequence_length(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  else if (lead == 0xE0) { length = 3; low = 0xA0; }
  else if (lead == 0xED) { length = 3; high = 0x9F; }  // no surrogates
  else if (lead >= 0xE1 && lead <= 0xEF) length = 3;
  else if (lead == 0xF0) { length = 4; low = 0x90; }
  else if (lead >= 0xF1 && lead <= 0xF3) length = 4;
  else if (lead == 0xF4) { length = 4; high = 0x8F; }  // nothing above U+10FFFF
  else return 0;
  if (pos + length > text.size()) return 0;
  if (byte(pos + 1) < low || byte(pos + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(pos + i) < 0x80 || byte(pos + i) > 0xBF) return 0;
  }
  return length;
}

/// Bad user input (config file, --set override, command line): the message is
/// one line that names the offending key, value or file and what was expected.
/// Front ends turn it into exit code 2.
///
/// Whatever the message quotes from the input, it stays one printable line:
/// control characters and bytes that are not UTF-8 are written as escapes
/// (\n, \x1b), and a message longer than kMaxBytes is cut there (to end
/// with "...", kMaxBytes + 3 bytes in all).
class ConfigError : public std::runtime_error {
 public:
  static constexpr std::size_t kMaxBytes = 1024;

  explicit ConfigError(const std::string& message) : std::runtime_error(one_line(message)) {}
  explicit ConfigError(const char* message) : ConfigError(std::string(message)) {}

  static std::string one_line(const std::string& text) {
    std::string out;
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t length = utf8_sequence_length(text, pos);
      const auto c = static_cast<unsigned char>(text[pos]);
      std::string piece;
      if (length == 1 && c >= 0x20 && c != 0x7F) {
        piece = text[pos];
      } else if (length > 1) {
        piece = text.substr(pos, length);
      } else if (c == '\n') {
        piece = "\\n";
      } else if (c == '\r') {
        piece = "\\r";
      } else if (c == '\t') {
        piece = "\\t";
      } else {
        char escaped[5];
        std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
        piece = escaped;
      }
      // Whole characters and escapes only, and never past kMaxBytes + "...".
      if (out.size() + piece.size() > kMaxBytes) {
        out += "...";
        break;
      }
      out += piece;
      pos += length == 0 ? 1 : length;
    }
    return out;
  }
};

}  // namespace basin
