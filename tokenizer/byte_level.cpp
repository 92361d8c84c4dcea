#include "basin/tokenizer/byte_level.h"

#include "basin/tokenizer/unicode_text.h"

namespace basin::tokenizer {

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_code_point_.fill(-1);
  const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  char32_t next_stand_in = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t code_point = printable(b) ? static_cast<char32_t>(b) : next_stand_in++;
    append_utf8(utf8_of_byte_[b], code_point);
    byte_of_code_point_[code_point] = b;
  }
}

void ByteLevelAlphabet::encode(std::string_view bytes, std::string& out) const {
  for (const char c : bytes) out += utf8_of_byte_[static_cast<unsigned char>(c)];
}

std::optional<unsigned char> ByteLevelAlphabet::byte_of(char32_t code_point) const {
  if (code_point >= byte_of_code_point_.size() || byte_of_code_point_[code_point] < 0) return std::nullopt;
  return static_cast<unsigned char>(byte_of_code_point_[code_point]);
}

}  // namespace basin::tokenizer
