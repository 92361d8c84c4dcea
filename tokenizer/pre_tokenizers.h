#pragma once
// tokenizer.json's "pre_tokenizer": how normalized text is cut into the words
// BPE merges within. Split (a regex, through PCRE2, or a string, with each of
// tokenizers' five behaviors), ByteLevel (GPT-2's regex and byte alphabet),
// Digits, Punctuation (Falcon's, with the five behaviors), Whitespace and
// WhitespaceSplit, Metaspace (sentencepiece's "▁") and a Sequence of them;
// any other component is refused, naming it.
#include <memory>
#include <string>
#include <vector>

#include "basin/tokenizer/json_place.h"

namespace basin::tokenizer {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Cuts each of `pieces` further (in place). `at_text_start`: pieces[0]
  /// begins where the input text does (not after an added token, nor after
  /// text a Split removed), which Metaspace's prepend_scheme "first" asks;
  /// kept true only while the new pieces[0] still does.
  virtual void split(std::vector<std::string>& pieces, bool& at_text_start) const = 0;
};

/// The pre-tokenizer `json` describes; nullptr for JSON null (none).
std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const nlohmann::json& json, const JsonPlace& place);

}  // namespace basin::tokenizer
