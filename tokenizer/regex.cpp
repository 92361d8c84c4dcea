#include "basin/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
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

// What Oniguruma's Ruby syntax reads otherwise than PCRE2 does: refused, not approximated.
void refuse_other_dialect(const std::string& pattern) {
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    const auto refuse = [&](const std::string& what) {
      throw std::invalid_argument(what + " at offset " + std::to_string(i) + " means another thing to tokenizers' Oniguruma than to PCRE2");
    };
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (std::string("hHvVwWbB").find(next) != std::string::npos) refuse(std::string("\\") + next);
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      else if (c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&') refuse("a class intersection &&");
      continue;
    }
    if (c == '[') {
      in_class = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') ++i;  // "[]...]": the first ] is a member
      if (i + 2 < pattern.size() && pattern[i + 1] == '^' && pattern[i + 2] == ']') i += 2;
    } else if (c == '^' || c == '$') {
      refuse(std::string("the anchor ") + c);
    } else if (c == '(' && i + 1 < pattern.size() && pattern[i + 1] == '?') {
      // Inline options other than i (m is PCRE2's s there, and x, s, a differ too).
      for (std::size_t j = i + 2; j < pattern.size() && pattern[j] != ':' && pattern[j] != ')'; ++j) {
        if (std::isalpha(static_cast<unsigned char>(pattern[j])) && pattern[j] != 'i') refuse(std::string("the option (?") + pattern[j]);
        if (!std::isalpha(static_cast<unsigned char>(pattern[j])) && pattern[j] != '-') break;  // a group kind: (?=, (?!, (?<
      }
    } else if (c == '{' && i + 1 < pattern.size() && pattern[i + 1] == ',') {
      refuse("a count {,n}");
    }
  }
}

constexpr PCRE2_SIZE kJitStackStart = 32 << 10, kJitStackMax = 64 << 20;  // long runs of a repeated group need depth

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
};

Regex::Regex(const std::string& pattern) : compiled_(std::make_unique<Compiled>()) {
  refuse_other_dialect(pattern);
  const std::string translated = with_unicode_whitespace(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // \C would match half a code point, which Oniguruma refuses.
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::invalid_argument(std::string(reinterpret_cast<const char*>(message)) + " at offset " +
                                std::to_string(offset));
  }
  if (pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0) {  // else the interpreter serves
    compiled_->stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);
    compiled_->context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(compiled_->context, nullptr, compiled_->stack);
  }
}

Regex::~Regex() {
  pcre2_match_context_free(compiled_->context);
  pcre2_jit_stack_free(compiled_->stack);
  pcre2_code_free(compiled_->code);
}

void Regex::for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_match) const {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // As Oniguruma's iterator in tokenizers: each search starts where the last match ended, and an
  // empty match right where the last one ended is passed over, one code point on.
  std::size_t start = 0;
  std::size_t last_end = std::string_view::npos;
  while (start <= text.size()) {
    // The text was checked once (Tokenizer::encode); checking it at every match would cost O(n^2).
    const int found = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.get(), compiled_->context);
    if (found == PCRE2_ERROR_NOMATCH) return;
    if (found < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(found, message, sizeof message);
      throw std::runtime_error("the regex failed at byte " + std::to_string(start) + ": " + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
    if (range[1] == range[0] && range[0] == last_end) {
      if (range[0] >= text.size()) return;
      start = range[0];
      next_code_point(text, start);
      continue;
    }
    on_match(range[0], range[1]);
    last_end = start = range[1];
  }
}

}  // namespace basin::tokenizer
