#pragma once
// The regexes of tokenizer.json's Split pre-tokenizers, compiled by PCRE2
// (JIT where the machine has it) with Unicode properties. tokenizers compiles
// them with Oniguruma, whose \s is Unicode's White_Space; PCRE2's leaves out
// U+0085, so \s and \S are read as \p{White_Space} and \P{White_Space}.
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

  /// Calls on_match(begin, end) for each non-empty match in `text` (valid
  /// UTF-8), left to right, each search starting where the last match ended.
  void for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_match) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace basin::tokenizer
