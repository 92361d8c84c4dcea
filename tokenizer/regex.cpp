#include "basin/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

#include "basin/tokenizer/unicode_text.h"

namespace basin::tokenizer {
namespace {

// \s and \S as Oniguruma reads them (its Unicode White_Space), everywhere but after an escaping backslash.
std::string with_unicode_whitespace(const std::string& pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') out += "\\p{White_Space}";
      else if (next == 'S') out += "\\P{White_Space}";
      else (out += '\\') += next;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
};

Regex::Regex(const std::string& pattern) : compiled_(std::make_unique<Compiled>()) {
  const std::string translated = with_unicode_whitespace(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::invalid_argument(std::string(reinterpret_cast<const char*>(message)) + " at offset " +
                                std::to_string(offset));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // the interpreter serves where JIT is missing
}

Regex::~Regex() { pcre2_code_free(compiled_->code); }

void Regex::for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_match) const {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start < text.size()) {
    // The text was checked once (Tokenizer::encode); checking it at every match would cost O(n^2).
    const int found = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (found == PCRE2_ERROR_NOMATCH) return;
    if (found < 0) throw std::runtime_error("PCRE2 match failed with error " + std::to_string(found));
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
    if (range[1] > range[0]) {
      on_match(range[0], range[1]);
      start = range[1];
    } else {
      // An empty match yields nothing; the search goes on past the code point it stood at.
      start = range[0];
      if (start < text.size()) next_code_point(text, start);
    }
  }
}

}  // namespace basin::tokenizer
