#pragma once
// Unicode as tokenizers' own tables have it, where they and utf8proc 2.8
// (Unicode 15) disagree: its Punctuation pre-tokenizer reads Unicode 8.0's
// categories, its Whitespace regex and its Lowercase Unicode 16 and 17, its
// normal forms Unicode 9.0. Each answer is measured on tokenizers over every
// code point (tests/tokenizer/unicode_tables.py), so basin's ids stay its ids.
#include <string>

namespace basin::tokenizer {

/// What tokenizers' Punctuation pre-tokenizer cuts at (Rust's
/// is_ascii_punctuation, which takes ASCII's symbols too, or a P* category).
bool is_tokenizers_punctuation(char32_t code_point);

/// A character of \w in the Rust regex crate (Unicode's Alphabetic, marks,
/// decimal digits, connector punctuation, Join_Control): what the Whitespace
/// pre-tokenizer keeps together.
bool is_regex_word_character(char32_t code_point);

/// `code_point` lowercased as Rust's char::to_lowercase does (which
/// tokenizers' Lowercase applies to each code point, without the final
/// sigma's context), appended to `out`: İ becomes two code points.
void append_lowercase(std::string& out, char32_t code_point);

/// Whether `code_point` has a combining class, decomposition or composition
/// only since Unicode 9.0: tokenizers' normal forms leave it as they leave an
/// unassigned one.
bool is_normalized_only_since_unicode_9(char32_t code_point);

}  // namespace basin::tokenizer
