#pragma once
// tokenizer.json's "decoder": how tokens become text again. ByteLevel (bytes
// back from GPT-2's alphabet), sentencepiece's Replace, ByteFallback, Fuse,
// Strip and Metaspace, and a Sequence of them, each as tokenizers chains
// them (token strings in, token strings out, joined at the end). Bytes that
// do not form UTF-8 come out as U+FFFD, as they do from tokenizers.
#include <memory>
#include <string>
#include <vector>

#include "basin/tokenizer/json_place.h"

namespace basin::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

/// The decoder `json` describes; nullptr for JSON null (tokens joined by spaces).
std::unique_ptr<Decoder> decoder_from_json(const nlohmann::json& json, const JsonPlace& place);

}  // namespace basin::tokenizer
