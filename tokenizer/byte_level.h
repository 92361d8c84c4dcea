#pragma once
// GPT-2's byte-level alphabet: each of the 256 bytes stands for one printable
// code point (the printable Latin-1 bytes for themselves, the others for
// U+0100 onwards), so that BPE works on any bytes with a vocabulary of text.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace basin::tokenizer {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  /// `bytes` with each byte written as its code point's UTF-8.
  void encode(std::string_view bytes, std::string& out) const;

  /// The byte `code_point` stands for, if it is one of the alphabet's.
  std::optional<unsigned char> byte_of(char32_t code_point) const;

 private:
  ByteLevelAlphabet();
  std::array<std::string, 256> utf8_of_byte_;
  std::array<int, 0x144> byte_of_code_point_{};  // -1 where none; the alphabet ends at U+0143
};

}  // namespace basin::tokenizer
