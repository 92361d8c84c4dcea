#include "basin/tokenizer/tokenizer.h"

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "basin/core/config/config_text.h"
#include "basin/tokenizer/added_tokens.h"
#include "basin/tokenizer/bpe.h"
#include "basin/tokenizer/decoders.h"
#include "basin/tokenizer/normalizers.h"
#include "basin/tokenizer/post_processor.h"
#include "basin/tokenizer/pre_tokenizers.h"
#include "basin/tokenizer/unicode_text.h"

namespace basin::tokenizer {

namespace fs = std::filesystem;

// serde's recursion limit, which tokenizers reads its files under.
constexpr int kMaxJsonDepth = 128;

struct Tokenizer::Parts {
  std::string file;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Bpe> model;
  AddedTokens added;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  std::unordered_map<int32_t, const AddedToken*> added_of_id;

  // Appends the ids of text the added tokens left: normalized, split into words, merged.
  void encode_text(std::string_view text, bool at_text_start, std::vector<int32_t>& ids) {
    if (text.empty()) return;
    const std::string normalized = normalizer ? normalizer->normalize(text) : std::string(text);
    std::vector<std::string> words;
    const auto words_of = [&](std::size_t begin, std::size_t end) {
      if (end == begin) return;
      words.assign(1, normalized.substr(begin, end - begin));
      bool starts_text = at_text_start && begin == 0;
      if (pre_tokenizer) pre_tokenizer->split(words, starts_text);
      for (const std::string& word : words) model->tokenize(word, ids);
    };
    if (!added.any_normalized()) return words_of(0, normalized.size());
    added.split(normalized, true, words_of, [&](int32_t id) { ids.push_back(id); });
  }
};

Tokenizer Tokenizer::from_file(const fs::path& path) {
  std::error_code error;
  const fs::path file = fs::is_directory(path, error) ? path / "tokenizer.json" : path;
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError("tokenizer '" + file.string() + "': cannot read it (expected a tokenizer.json, or a model directory holding one)");
  constexpr std::uintmax_t kMaxBytes = std::uintmax_t{1} << 30;
  const std::uintmax_t bytes = fs::file_size(file, error);
  if (error) throw ConfigError("tokenizer '" + file.string() + "': cannot read it: " + error.message());
  if (bytes > kMaxBytes) throw ConfigError("tokenizer '" + file.string() + "': larger than 1 GiB; no tokenizer.json is");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  // Deeper nesting than any tokenizer.json has would only exhaust the stack of whoever walks it.
  const config_text::JsonFailure failure = config_text::prescan(text, kMaxJsonDepth);
  if (failure.kind != config_text::JsonFailure::Kind::kNone) {
    throw ConfigError("tokenizer '" + file.string() + "': " + failure.reason);
  }
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& bad) {
    throw ConfigError("tokenizer '" + file.string() + "': not JSON: " + bad.what());
  }
  return Tokenizer(json, file.string());
}

Tokenizer::Tokenizer(const nlohmann::json& json, const std::string& file) : parts_(std::make_unique<Parts>()) {
  Parts& parts = *parts_;
  parts.file = file;
  const JsonPlace root{file, ""};
  if (!json.is_object()) throw root.error("expected an object, as tokenizers saves");
  for (const char* key : {"truncation", "padding"}) {
    if (json.contains(key) && !json.at(key).is_null()) {
      throw (root / key).error("basin tokenizes whole texts; set it to null (it would cut or pad what tokenizers encodes)");
    }
  }
  const auto& model = root.child(json, "model", [](const nlohmann::json& v) { return v.is_object(); }, "an object");
  const std::string type = model.contains("type") ? (root / "model").type(model) : "BPE";
  if (type != "BPE") throw (root / "model" / "type").error("model '" + type + "' is not supported (basin reads BPE)");
  const auto null = nlohmann::json();
  const auto component = [&](const char* key) -> const nlohmann::json& { return json.contains(key) ? json.at(key) : null; };
  parts.normalizer = normalizer_from_json(component("normalizer"), root / "normalizer");
  parts.pre_tokenizer = pre_tokenizer_from_json(component("pre_tokenizer"), root / "pre_tokenizer");
  parts.model = std::make_unique<Bpe>(model, root / "model");
  parts.added = AddedTokens(component("added_tokens"), root / "added_tokens", parts.normalizer.get(), *parts.model);
  parts.post_processor = std::make_unique<PostProcessor>(component("post_processor"), root / "post_processor");
  parts.decoder = decoder_from_json(component("decoder"), root / "decoder");
  for (const AddedToken& token : parts.added.tokens()) parts.added_of_id[token.id] = &token;
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) {
  if (const auto bad = first_invalid_utf8(text)) {
    throw std::invalid_argument("byte " + std::to_string(*bad) + " is not UTF-8");
  }
  std::vector<int32_t> ids;
  parts_->added.split(
      text, false, [&](std::size_t begin, std::size_t end) { parts_->encode_text(text.substr(begin, end - begin), begin == 0, ids); },
      [&](int32_t id) { ids.push_back(id); });
  return add_special_tokens ? parts_->post_processor->apply(std::move(ids)) : ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const std::vector<std::string>& vocab = parts_->model->tokens();
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const auto added = parts_->added_of_id.find(id); added != parts_->added_of_id.end()) {
      if (!(skip_special_tokens && added->second->special)) tokens.push_back(added->second->decoded);
    } else if (id >= 0 && static_cast<std::size_t>(id) < vocab.size() && !vocab[id].empty()) {
      tokens.push_back(vocab[id]);
    }
  }
  if (!parts_->decoder) {
    std::string joined;
    for (std::size_t i = 0; i < tokens.size(); ++i) (joined += i ? " " : "") += tokens[i];
    return joined;
  }
  std::string text;
  for (const std::string& piece : parts_->decoder->decode_chain(std::move(tokens))) text += piece;
  return text;
}

int32_t Tokenizer::token_to_id(const std::string& token) const {
  for (const AddedToken& added : parts_->added.tokens()) {
    if (added.content == token) return added.id;
  }
  return parts_->model->id_of(token);
}

int64_t Tokenizer::vocab_size() const {
  int64_t size = static_cast<int64_t>(parts_->model->tokens().size());
  for (const AddedToken& token : parts_->added.tokens()) size = std::max<int64_t>(size, token.id + int64_t{1});
  return size;
}

const std::string& Tokenizer::file() const { return parts_->file; }

}  // namespace basin::tokenizer
