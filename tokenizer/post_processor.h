#pragma once
// tokenizer.json's "post_processor": the special tokens an encoding gets
// around the text when they are asked for (Llama 3's TemplateProcessing puts
// <|begin_of_text|> first). TemplateProcessing's single template, Roberta's
// and Bert's cls/sep, ByteLevel (offsets only: no ids change) and a Sequence.
#include <cstdint>
#include <memory>
#include <vector>

#include "basin/tokenizer/json_place.h"

namespace basin::tokenizer {

class PostProcessor {
 public:
  /// The processor `json` describes; JSON null adds nothing.
  PostProcessor(const nlohmann::json& json, const JsonPlace& place);

  /// `ids` of one sequence, with the template's special tokens around them.
  std::vector<int32_t> apply(std::vector<int32_t> ids) const;

 private:
  void read(const nlohmann::json& json, const JsonPlace& place);

  // The template as runs of ids; kSequence stands where the text's ids go.
  static constexpr int32_t kSequence = -1;
  std::vector<int32_t> template_;
};

}  // namespace basin::tokenizer
