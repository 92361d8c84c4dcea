#pragma once
// The regexes of tokenizer.json's Split pre-tokenizers, compiled by PCRE2
// (JIT where the machine has it) with Unicode properties. tokenizers compiles
// them with Oniguruma, whose \s is Unicode's White_Space; PCRE2's leaves out
// U+0085, so \s and \S are read as \p{White_Space} and \P{White_Space}.
// What Oniguruma's Ruby syntax reads otherwise (anchors ^ and $, which match
// at every line there; \h, \v, \w, \b; inline options but i; class
// intersection; {,n}) is refused; the published tokenizers' regexes use none.
// Properties follow each library's Unicode tables: PCRE2 10.42 knows Unicode
// 14, tokenizers' Oniguruma 16, so letters and digits assigned since (CJK
// Extension H, say) are split otherwise.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace basin::tokenizer {

class Regex {
 public:
  /// Throws std::invalid_argument with PCRE2's message and offset where `pattern` does not compile.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Calls on_match(begin, end) for each match in `text` (valid UTF-8), left
  /// to right, each search starting where the last match ended; an empty
  /// match is passed on too (it cuts the text), but not one right where the
  /// last match ended. Throws std::runtime_error where PCRE2 gives up.
  void for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_match) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace basin::tokenizer
