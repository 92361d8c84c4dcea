#pragma once
// tokenizer.json's "normalizer": what the text becomes before it is split.
// Unicode's normal forms (Qwen2's NFC) through utf8proc, held to tokenizers'
// Unicode 9.0 tables, Lowercase and Strip (BERT-style files), Prepend and
// Replace (the sentencepiece-style "▁" of Llama 2 and Mistral), and a
// Sequence of them; any other component is refused, naming it.
#include <memory>
#include <string>
#include <string_view>

#include "basin/tokenizer/json_place.h"

namespace basin::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

/// The normalizer `json` describes; nullptr for JSON null (none).
std::unique_ptr<Normalizer> normalizer_from_json(const nlohmann::json& json, const JsonPlace& place);

}  // namespace basin::tokenizer
