#include "basin/tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <queue>

#include "basin/tokenizer/unicode_text.h"

namespace basin::tokenizer {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

Bpe::Bpe(const nlohmann::json& json, const JsonPlace& place) {
  const auto object = [](const nlohmann::json& v) { return v.is_object(); };
  const auto array = [](const nlohmann::json& v) { return v.is_array(); };
  if (json.contains("dropout") && !json.at("dropout").is_null() &&
      !(json.at("dropout").is_number() && json.at("dropout").get<double>() == 0.0)) {
    throw (place / "dropout").error("BPE dropout makes tokenization random; basin reads null or 0 only");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (json.contains(key) && !json.at(key).is_null() && !place.string(json, key).empty()) {
      throw (place / key).error("is not supported (the byte-level and sentencepiece-style BPEs basin reads have none)");
    }
  }
  const nlohmann::json& vocab = place.child(json, "vocab", object, "an object of token: id");
  int64_t largest = -1;
  for (const auto& [token, id] : vocab.items()) {
    if (!is_token_id(id)) throw (place / "vocab").error("token '" + token + "' has id " + id.dump() + ", expected an integer in [0, 2^31)");
    largest = std::max<int64_t>(largest, id.get<int64_t>());
  }
  // Ids are an array's indexes here: a few holes are fine, an id far past the tokens is a broken file.
  const auto entries = static_cast<int64_t>(vocab.size());
  if (largest >= 16 * entries + 65536) {
    throw (place / "vocab").error(std::to_string(entries) + " tokens with ids up to " + std::to_string(largest) + "; expected ids near 0 to the count");
  }
  token_of_id_.resize(static_cast<std::size_t>(largest + 1));
  for (const auto& [token, id] : vocab.items()) {
    id_of_token_[token] = id.get<int32_t>();
    token_of_id_[id.get<std::size_t>()] = token;
  }
  const nlohmann::json& merges = place.child(json, "merges", array, "a list of merges");
  const JsonPlace merges_place = place / "merges";
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& entry = merges[rank];
    std::string left, right;
    if (entry.is_string()) {
      const std::string text = entry.get<std::string>();
      const std::size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        throw merges_place[rank].error("'" + text + "' is not two tokens separated by one space");
      }
      left = text.substr(0, space), right = text.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      left = entry[0].get<std::string>(), right = entry[1].get<std::string>();
    } else {
      throw merges_place[rank].error("expected \"a b\" or [\"a\", \"b\"], got " + entry.dump().substr(0, 80));
    }
    for (const std::string& name : {left, right, left + right}) {
      if (!id_of_token_.count(name)) {
        throw merges_place[rank].error("merge '" + left + " " + right + "' names '" + name + "', which is not in the vocab");
      }
    }
    merges_[pair_key(id_of_token_[left], id_of_token_[right])] = {static_cast<uint32_t>(rank), id_of_token_[left + right]};
  }
  if (json.contains("unk_token") && !json.at("unk_token").is_null()) {
    const std::string unk = place.string(json, "unk_token");
    if (!id_of_token_.count(unk)) throw (place / "unk_token").error("'" + unk + "' is not in the vocab");
    unk_ = id_of_token_[unk];
  }
  fuse_unk_ = place.boolean(json, "fuse_unk", false);
  byte_fallback_ = place.boolean(json, "byte_fallback", false);
  ignore_merges_ = place.boolean(json, "ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_token_[b] = id_of(name);
  }
}

int32_t Bpe::id_of(const std::string& token) const {
  const auto found = id_of_token_.find(token);
  return found == id_of_token_.end() ? -1 : found->second;
}

void Bpe::tokenize(const std::string& word, std::vector<int32_t>& ids) {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t whole = id_of(word);
    if (whole >= 0) {
      ids.push_back(whole);
      return;
    }
  }
  if (word.size() > kCachedWordBytes) return merge(word, ids);
  const auto hit = cache_.find(word);
  if (hit != cache_.end()) {
    ids.insert(ids.end(), hit->second.begin(), hit->second.end());
    return;
  }
  const std::size_t first = ids.size();
  merge(word, ids);
  if (cache_.size() < kCacheWords) cache_.emplace(word, std::vector<int32_t>(ids.begin() + first, ids.end()));
}

void Bpe::merge(const std::string& word, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id, prev, next;
  };
  std::vector<Symbol> symbols;
  const auto push = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1});
  };
  // As tokenizers: an unknown character's <unk> waits (fuse_unk extends it) until a known
  // character comes, so that byte-fallback tokens met in between come first.
  bool unk_waits = false;
  std::string character;
  for (std::size_t pos = 0; pos < word.size();) {
    const std::size_t begin = pos;
    next_code_point(word, pos);
    character.assign(word, begin, pos - begin);
    if (const int32_t id = id_of(character); id >= 0) {
      if (unk_waits) push(unk_), unk_waits = false;
      push(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : character) all = all && byte_token_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : character) push(byte_token_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_ < 0) continue;  // as tokenizers: with no unknown token, the character is dropped
    if (unk_waits && !fuse_unk_) push(unk_);
    unk_waits = true;
  }
  if (unk_waits) push(unk_);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int32_t pos, left, right, merged;
    bool operator>(const Candidate& other) const { return rank != other.rank ? rank > other.rank : pos > other.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto offer = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto found = merges_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (found != merges_.end()) queue.push({found->second.rank, pos, symbols[pos].id, symbols[next].id, found->second.merged});
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) offer(pos);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    // Stale: the left symbol was merged away (id -1), merged into another, or its neighbour changed.
    if (left.id != top.left || left.next < 0 || symbols[left.next].id != top.right) continue;
    Symbol& right = symbols[left.next];
    left.id = top.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    right.id = -1;
    if (left.prev >= 0) offer(left.prev);
    offer(top.pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = symbols[pos].next) ids.push_back(symbols[pos].id);
}

}  // namespace basin::tokenizer
