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
// bytes, y the same shifted by one, both [N, block_size] int64. The tiling is
// fixed, so the run's seed, shuffling, sharding across ranks and resume apply
// to windows as they do to any other samples.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <ATen/ATen.h>

#include "basin/core/train/dataset.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kByteVocabulary = 256;

/// The files `value` names: a path, or a list of paths; a folder gives its
/// regular files sorted by name.
std::vector<fs::path> files_of(const Params& params, const std::string& key, const Json& value) {
  std::vector<std::string> named;
  if (value.is_string()) {
    named.push_back(value.get<std::string>());
  } else if (value.is_array() && !value.empty() && std::all_of(value.begin(), value.end(), [](const Json& v) {
               return v.is_string();
             })) {
    for (const Json& v : value) named.push_back(v.get<std::string>());
  } else {
    params.fail(key, "a file, a folder or a list of them", value);
  }
  std::vector<fs::path> files;
  for (const std::string& name : named) {
    std::error_code error;
    if (fs::is_directory(name, error)) {
      std::vector<fs::path> inside;
      for (const auto& entry : fs::directory_iterator(name, error)) {
        if (entry.is_regular_file()) inside.push_back(entry.path());
      }
      std::sort(inside.begin(), inside.end());
      if (inside.empty()) {
        throw ConfigError("config key '" + params.path_of(key) + "': folder '" + name + "' holds no files");
      }
      files.insert(files.end(), inside.begin(), inside.end());
    } else {
      files.emplace_back(name);
    }
  }
  return files;
}

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

/// `tokens` tiled with windows of block + 1, one every block tokens.
TensorDataset windows(const at::Tensor& tokens, int64_t block, const std::string& where) {
  if (tokens.size(0) < block + 1) {
    throw ConfigError(where + " holds " + std::to_string(tokens.size(0)) + " bytes; expected at least block_size + 1 = " +
                      std::to_string(block + 1));
  }
  const at::Tensor tiles = tokens.to(at::kLong).unfold(0, block + 1, block);
  return TensorDataset(tiles.slice(1, 0, block).contiguous(), tiles.slice(1, 1, block + 1).contiguous());
}

std::string named(const Params& params, const std::string& key, const std::vector<fs::path>& files) {
  std::string text = "config key '" + params.path_of(key) + "': '" + files.front().string() + "'";
  if (files.size() > 1) text += " and " + std::to_string(files.size() - 1) + " more file(s)";
  return text;
}

std::shared_ptr<DataSplits> text_corpus(Params& params, int64_t /*seed*/) {
  const int64_t block = params.integer("block_size", 0, 1);
  if (block == 0) params.fail("block_size", "a positive number of bytes per window", params.raw("block_size"));
  if (!params.has("train")) params.fail("train", "a file, a folder or a list of them", Json());
  const auto train_files = files_of(params, "train", params.raw("train"));
  at::Tensor train = read_bytes(params, "train", train_files);
  auto splits = std::make_shared<DataSplits>();
  if (params.has("test")) {
    const auto test_files = files_of(params, "test", params.raw("test"));
    splits->test = windows(read_bytes(params, "test", test_files), block, named(params, "test", test_files));
  } else {
    const double fraction = params.number("test_fraction", 0.1, 0.0, 1.0);
    const auto held = static_cast<int64_t>(static_cast<double>(train.size(0)) * fraction);
    if (fraction <= 0.0 || fraction >= 1.0 || held < block + 1) {
      throw ConfigError("config key '" + params.path_of("test_fraction") + "': " + std::to_string(fraction) + " of " +
                        std::to_string(train.size(0)) + " bytes holds " + std::to_string(held) +
                        " for the test split; expected between 0 and 1, and at least block_size + 1 = " +
                        std::to_string(block + 1) + " bytes (or give \"test\" files)");
    }
    splits->test = windows(train.slice(0, train.size(0) - held), block, named(params, "train", train_files) + "'s last " +
                                                                        std::to_string(held) + " bytes");
    train = train.slice(0, 0, train.size(0) - held);
  }
  splits->train = windows(train, block, named(params, "train", train_files));
  splits->info = DatasetInfo{{block}, kByteVocabulary};
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("text", text_corpus);

}  // namespace
}  // namespace basin
