#pragma once
// tokenizer.json's "added_tokens": strings (special tokens such as
// <|begin_of_text|>, and tokens users added) found in the text before any
// splitting and given their id whole. As tokenizers does: the leftmost match
// wins, the longest where several start there; tokens marked "normalized"
// are found in the normalized text, the others in the text as written;
// lstrip and rstrip take the whitespace beside a match with it. Ids are
// tokenizers' too, not the file's: a token the model's vocabulary holds
// has its id there, the others the next ids after the vocabulary's size,
// in the file's order (real files agree with that; a hand-edited one may not).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "basin/tokenizer/json_place.h"

namespace basin::tokenizer {

class Bpe;
class Normalizer;

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, normalized;
  // What decoding gives for it: a "normalized" token's content normalized, as
  // tokenizers (0.23) hands it to the decoder; the content otherwise.
  std::string decoded;
};

class AddedTokens {
 public:
  AddedTokens() = default;
  /// Reads the list; a token's `normalized` content is matched as `normalizer` (may be null) makes it.
  AddedTokens(const nlohmann::json& json, const JsonPlace& place, const Normalizer* normalizer, const Bpe& model);

  /// Cuts `text` at the tokens whose `normalized` flag equals `normalized`:
  /// on_text(begin, end) for the text between them (maybe empty), on_token(id) for each.
  void split(std::string_view text, bool normalized, const std::function<void(std::size_t, std::size_t)>& on_text,
             const std::function<void(int32_t)>& on_token) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool any_normalized() const { return any_normalized_; }

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::string> pattern_;  // what each token is matched as
  std::vector<std::vector<std::size_t>> by_first_byte_[2];  // [normalized][byte]: tokens, longest first
  bool any_normalized_ = false;
};

}  // namespace basin::tokenizer
