// "data": {"name": "text"}: UTF-8 text read as bytes (a vocabulary of 256,
// no tokenizer to fetch), cut into windows for next-token prediction:
//
//     {"data": {"name": "text", "train": "corpus/", "block_size": 64, "test_fraction": 0.1}}
//
// "train" and "test" are a file, a folder (its files, by name) or a list of
// either; their bytes are joined in that order. Without "test", the last
// "test_fraction" of the train bytes (default 0.1) is held out, a tail no
// training window reaches. Each split is tiled with windows of block_size + 1
// bytes starting every block_size bytes: x is a window's first block_size
// bytes, y the same shifted by one, [N, block_size], views of the bytes
// stored once (batches carry them as int64). The tiling is fixed, so the
// run's seed, shuffling, sharding across ranks and resume apply to windows
// as they do to any other samples.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <ATen/ATen.h>

#include "basin/datasets/token_windows.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kByteVocabulary = 256;

/// The bytes of `files`, joined, as a uint8 tensor.
at::Tensor read_bytes(const Params& params, const std::string& key, const std::vector<fs::path>& files) {
  std::vector<uint8_t> bytes;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      throw ConfigError("config key '" + params.path_of(key) + "': cannot read '" + file.string() +
                        "': " + std::strerror(errno));
    }
    bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) throw ConfigError("config key '" + params.path_of(key) + "': reading '" + file.string() + "' failed");
  }
  return at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, at::kByte).clone();
}

std::shared_ptr<DataSplits> text_corpus(Params& params, int64_t /*seed*/) {
  auto read = [&](const std::string& key, const std::vector<fs::path>& files) { return read_bytes(params, key, files); };
  auto splits = std::make_shared<DataSplits>(token_windows::split_windows(params, read, "bytes"));
  splits->info.num_classes = kByteVocabulary;
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("text", text_corpus);

}  // namespace
}  // namespace basin
