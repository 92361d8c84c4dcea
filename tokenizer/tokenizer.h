#pragma once
// A tokenizer.json (the file Hugging Face's `tokenizers` saves and every
// Llama-family checkpoint ships) read in C++: text to ids and back, as
// tokenizers gives them. The pipeline, in tokenizers' order: added tokens
// found whole; the rest normalized, pre-tokenized into words, and each word
// BPE-merged; the post-processor's special tokens around it when asked for.
//
//     auto tokenizer = basin::tokenizer::Tokenizer::from_file("Llama-3.2-1B/");
//     std::vector<int32_t> ids = tokenizer.encode("Hello, world", /*add_special_tokens=*/true);
//     std::string text = tokenizer.decode(ids, /*skip_special_tokens=*/true);
//
// What a file holds that basin does not read (a Unigram or WordPiece model, a
// BertNormalizer, truncation, a regex Oniguruma reads otherwise) is refused
// as a ConfigError naming the file and the key, never approximated. Text
// must be UTF-8. The ids are tokenizers', except where a regex (Split's,
// ByteLevel's) meets a letter or digit newer than PCRE2's Unicode 14
// tables, which it reads otherwise (docs/language-models.md#tokenizers).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace basin::tokenizer {

class Tokenizer {
 public:
  /// Reads `path`: a tokenizer.json, or a model directory holding one.
  static Tokenizer from_file(const std::filesystem::path& path);
  /// The tokenizer `json` describes; `file` names it in errors.
  Tokenizer(const nlohmann::json& json, const std::string& file);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  /// The ids of `text`, which must be UTF-8: std::invalid_argument names the
  /// offset of the first byte that is not. Not const: it caches the words it
  /// has merged (one Tokenizer per thread).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true);

  /// The text `ids` stand for; ids the tokenizer does not know are skipped, as tokenizers skips them.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  /// The id of `token` (an added token or one of the model's), or -1.
  int32_t token_to_id(const std::string& token) const;
  /// One more than the largest id: the embedding rows a model needs.
  int64_t vocab_size() const;
  /// The file it was read from.
  const std::string& file() const;

 private:
  struct Parts;
  std::unique_ptr<Parts> parts_;
};

}  // namespace basin::tokenizer
