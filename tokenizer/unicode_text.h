#pragma once
// UTF-8 as the tokenizer walks it: code points read and written, whitespace
// as Unicode's White_Space property has it (the \s of the regexes tokenizers
// compiles), and bytes that are not UTF-8 turned into U+FFFD the way Rust's
// String::from_utf8_lossy does, which is what tokenizers' decoders give back.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace basin::tokenizer {

/// The code point whose well-formed UTF-8 starts at text[pos]; pos moves past it.
char32_t next_code_point(std::string_view text, std::size_t& pos);

/// `code_point` appended to `out` as UTF-8.
void append_utf8(std::string& out, char32_t code_point);

/// Unicode's White_Space property (Rust's char::is_whitespace).
bool is_whitespace(char32_t code_point);

/// The offset of the first byte of `text` that is not well-formed UTF-8.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

/// `bytes` with each maximal ill-formed subsequence replaced by U+FFFD.
std::string utf8_lossy(std::string_view bytes);

/// `text` with every occurrence of `from` (not empty) replaced by `to`, left to right.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

/// Whether `text` is exactly one code point (a "char" in tokenizers' JSON).
bool is_one_code_point(std::string_view text);

}  // namespace basin::tokenizer
