#include "basin/tokenizer/added_tokens.h"

#include <algorithm>
#include <unordered_map>

#include "basin/tokenizer/bpe.h"
#include "basin/tokenizer/normalizers.h"
#include "basin/tokenizer/unicode_text.h"

namespace basin::tokenizer {
namespace {

// The whitespace that ends text[begin, end) begins here.
std::size_t whitespace_before(std::string_view text, std::size_t begin, std::size_t end) {
  std::size_t at = end;
  while (at > begin) {
    std::size_t start = at - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    std::size_t pos = start;
    if (!is_whitespace(next_code_point(text, pos))) break;
    at = start;
  }
  return at;
}

// The whitespace that starts text[begin, ...) ends here.
std::size_t whitespace_after(std::string_view text, std::size_t begin) {
  std::size_t at = begin;
  while (at < text.size()) {
    std::size_t pos = at;
    if (!is_whitespace(next_code_point(text, pos))) break;
    at = pos;
  }
  return at;
}

}  // namespace

AddedTokens::AddedTokens(const nlohmann::json& json, const JsonPlace& place, const Normalizer* normalizer, const Bpe& model) {
  if (json.is_null()) return;
  if (!json.is_array()) throw place.error("expected a list of added tokens");
  auto next_id = static_cast<int64_t>(model.size());
  std::unordered_map<std::string, int32_t> id_of_content;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const JsonPlace at = place[i];
    const auto& entry = json[i];
    at.child(entry, "id", is_token_id, "a token id in [0, 2^31)");
    const std::string content = at.string(entry, "content");
    // tokenizers' id, whatever the file says: the vocabulary's, an earlier entry's, or the next one.
    int32_t id = model.id_of(content);
    if (id < 0 && id_of_content.count(content)) id = id_of_content[content];
    if (id < 0) {
      if (next_id > INT32_MAX) throw (at / "id").error("more ids than 2^31");
      id = static_cast<int32_t>(next_id++);
    }
    id_of_content[content] = id;
    AddedToken token{id, content, at.boolean(entry, "special", false), at.boolean(entry, "lstrip", false),
                     at.boolean(entry, "rstrip", false), at.boolean(entry, "normalized", false), std::string()};
    if (token.content.empty()) throw (at / "content").error("an added token is empty");
    if (first_invalid_utf8(token.content)) throw (at / "content").error("is not UTF-8");
    if (at.boolean(entry, "single_word", false)) {
      throw (at / "single_word").error("added token '" + token.content + "': single_word tokens are not supported");
    }
    std::string pattern = token.normalized && normalizer ? normalizer->normalize(token.content) : token.content;
    any_normalized_ = any_normalized_ || token.normalized;
    token.decoded = pattern;
    tokens_.push_back(std::move(token));
    pattern_.push_back(std::move(pattern));
  }
  for (auto& table : by_first_byte_) table.resize(256);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (pattern_[i].empty()) continue;
    by_first_byte_[tokens_[i].normalized][static_cast<unsigned char>(pattern_[i][0])].push_back(i);
  }
  for (auto& table : by_first_byte_) {
    for (auto& candidates : table) {
      std::stable_sort(candidates.begin(), candidates.end(),
                       [&](std::size_t a, std::size_t b) { return pattern_[a].size() > pattern_[b].size(); });
    }
  }
}

void AddedTokens::split(std::string_view text, bool normalized, const std::function<void(std::size_t, std::size_t)>& on_text,
                        const std::function<void(int32_t)>& on_token) const {
  const auto& table = by_first_byte_[normalized];
  std::size_t gap = 0;  // where the text since the last token begins
  if (!table.empty()) {
    for (std::size_t at = 0; at < text.size();) {
      const auto& candidates = table[static_cast<unsigned char>(text[at])];
      const std::size_t* found = nullptr;
      for (const std::size_t& i : candidates) {
        if (text.compare(at, pattern_[i].size(), pattern_[i]) == 0) {
          found = &i;
          break;
        }
      }
      if (!found) {
        ++at;
        continue;
      }
      const AddedToken& token = tokens_[*found];
      const std::size_t begin = token.lstrip ? whitespace_before(text, gap, at) : at;
      std::size_t end = at + pattern_[*found].size();
      if (token.rstrip) end = whitespace_after(text, end);
      on_text(gap, begin);
      on_token(token.id);
      gap = at = end;
    }
  }
  on_text(gap, text.size());
}

}  // namespace basin::tokenizer
