#pragma once
// tokenizer.json's "model" of type BPE: a vocabulary and ranked merges. A word
// starts as its code points (each a vocabulary token, or its bytes as
// <0xXX> tokens under byte_fallback, or the unknown token) and the
// lowest-ranked adjacent pair is merged, leftmost first, until none is left:
// tokenizers' order exactly. Llama 3's ignore_merges takes a word that is in
// the vocabulary whole. Merges read as "a b" strings or ["a", "b"] pairs.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "basin/tokenizer/json_place.h"

namespace basin::tokenizer {

class Bpe {
 public:
  /// The model `json` describes; what is missing or unsupported is refused naming its key.
  Bpe(const nlohmann::json& json, const JsonPlace& place);

  /// Appends the ids of `word` to `ids`, caching them for the next time.
  void tokenize(const std::string& word, std::vector<int32_t>& ids);

  /// The id of `token`, or -1.
  int32_t id_of(const std::string& token) const;
  /// The vocabulary's tokens by id ("" where an id has none).
  const std::vector<std::string>& tokens() const { return token_of_id_; }
  /// How many tokens the vocabulary holds (tokenizers' get_vocab_size).
  std::size_t size() const { return id_of_token_.size(); }

 private:
  void merge(const std::string& word, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> id_of_token_;
  std::vector<std::string> token_of_id_;
  struct Merge {
    uint32_t rank;
    int32_t merged;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // by the pair's ids
  int32_t unk_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_token_{};  // <0xXX>'s id, or -1

  static constexpr std::size_t kCachedWordBytes = 64, kCacheWords = 1 << 16;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace basin::tokenizer
