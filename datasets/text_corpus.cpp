// "data": {"name": "text"}: UTF-8 text read as bytes (a vocabulary of 256,
// no tokenizer to fetch), or tokenized with a tokenizer.json, cut into
// windows for next-token prediction:
//
//     {"data": {"name": "text", "train": "corpus/", "block_size": 64, "test_fraction": 0.1}}
//     {"data": {"name": "text", "train": "corpus/", "block_size": 256,
//               "tokenizer": "SmolLM2-135M/", "eos_token": "<|endoftext|>"}}
//
// With "tokenizer" (a tokenizer.json, or a model directory holding one) each
// file is one document: its text is encoded as the tokenizer's encode gives
// it without special tokens, and "eos_token", when given, follows each
// file's ids; without it the files' ids simply join. A file that is not
// UTF-8 is refused, naming it and the offset of its first bad byte (what
// Python's open() refuses too): basin never guesses an encoding. The ids are
// held in memory as int32; the vocabulary is the tokenizer's. Bytes are not
// held: each file is memory-mapped as it lies on disk.
//
// "train" and "test" are a file, a folder (its files, by name) or a list of
// either; their bytes are joined in that order. Without "test", the last
// "test_fraction" of the train bytes (default 0.1) is held out, a tail no
// training window reaches. Each split is tiled with windows of block_size + 1
// bytes starting every block_size bytes: x is a window's first block_size
// bytes, y the same shifted by one, [N, block_size], cut from the stream as
// batches are gathered (batches carry them as int64). The tiling is fixed, so the
// run's seed, shuffling, sharding across ranks and resume apply to windows
// as they do to any other samples.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

#include <ATen/ATen.h>

#include "basin/datasets/token_windows.h"
#include "basin/tokenizer/tokenizer.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kByteVocabulary = 256;

/// The bytes of `file`, appended to `bytes`.
void append_file(const Params& params, const std::string& key, const fs::path& file, std::string& bytes) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw ConfigError("config key '" + params.path_of(key) + "': cannot read '" + file.string() + "': " + std::strerror(errno));
  }
  bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw ConfigError("config key '" + params.path_of(key) + "': reading '" + file.string() + "' failed");
}

/// The bytes of `files`, joined, each file mapped as it lies on disk.
TokenStream read_bytes(const Params& params, const std::string& key, const std::vector<fs::path>& files) {
  TokenStream bytes;
  for (const fs::path& file : files) {
    try {
      bytes.append_file(file, TokenType::kUint8);
    } catch (const std::runtime_error& unmapped) {
      throw ConfigError("config key '" + params.path_of(key) + "': " + unmapped.what());
    }
  }
  return bytes;
}

/// The ids of `files`' texts, each followed by `eos` (when not -1), joined, held as int32.
TokenStream read_tokens(const Params& params, const std::string& key, const std::vector<fs::path>& files,
                       tokenizer::Tokenizer& tokenizer, int32_t eos) {
  std::vector<int32_t> ids;
  std::string text;
  for (const fs::path& file : files) {
    text.clear();
    append_file(params, key, file, text);
    std::vector<int32_t> encoded;
    try {
      encoded = tokenizer.encode(text, /*add_special_tokens=*/false);
    } catch (const std::invalid_argument& not_utf8) {
      throw ConfigError("config key '" + params.path_of(key) + "': '" + file.string() + "': " + not_utf8.what() +
                        "; the tokenizer reads UTF-8 text only (convert the file, e.g. with iconv)");
    } catch (const std::runtime_error& failed) {  // the tokenizer's regex gave up on this text
      throw std::runtime_error("config key '" + params.path_of(key) + "': tokenizing '" + file.string() + "': " + failed.what());
    }
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    if (eos >= 0) ids.push_back(eos);
  }
  TokenStream stream;
  stream.append(at::from_blob(ids.data(), {static_cast<int64_t>(ids.size())}, at::kInt));
  return stream;
}

std::shared_ptr<DataSplits> text_corpus(Params& params, int64_t /*seed*/) {
  if (!params.has("tokenizer")) {
    if (params.has("eos_token")) throw ConfigError("config key '" + params.path_of("eos_token") + "': needs data.tokenizer (bytes have no end-of-text token)");
    auto read = [&](const std::string& key, const std::vector<fs::path>& files) { return read_bytes(params, key, files); };
    auto splits = std::make_shared<DataSplits>(token_windows::split_windows(params, read, "bytes"));
    splits->info.num_classes = kByteVocabulary;
    return splits;
  }
  const std::string path = params.string("tokenizer");
  std::optional<tokenizer::Tokenizer> tokenizer;
  try {
    tokenizer.emplace(tokenizer::Tokenizer::from_file(path));
  } catch (const ConfigError& bad) {
    throw ConfigError("config key '" + params.path_of("tokenizer") + "': " + bad.what());
  }
  int32_t eos = -1;
  if (params.has("eos_token")) {
    const std::string token = params.string("eos_token");
    eos = tokenizer->token_to_id(token);
    if (eos < 0) throw ConfigError("config key '" + params.path_of("eos_token") + "': '" + token + "' is no token of '" + tokenizer->file() + "'");
  }
  auto read = [&](const std::string& key, const std::vector<fs::path>& files) { return read_tokens(params, key, files, *tokenizer, eos); };
  auto splits = std::make_shared<DataSplits>(token_windows::split_windows(params, read, "tokens"));
  splits->info.num_classes = tokenizer->vocab_size();
  splits->info.tokenizer = fs::absolute(tokenizer->file()).string();
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("text", text_corpus);

}  // namespace
}  // namespace basin
