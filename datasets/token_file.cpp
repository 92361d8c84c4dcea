// "data": {"name": "tokens"}: a tokenized corpus, one flat stream of token
// ids per split, cut into next-token windows as "text" cuts bytes:
//
//     {"data": {"name": "tokens", "train": "train.bin", "test": "val.bin",
//               "dtype": "uint16", "vocab_size": 50257, "block_size": 128}}
//
// A ".pt" or ".pth" file holds a 1-D integer tensor Python's torch.save
// wrote (read through init_from's checks); any other file is raw ids of
// "dtype" ("uint16", the default, as nanoGPT's prepare scripts write them, or
// "uint32"), little-endian. Files in a list or folder are joined in order.
// "vocab_size" defaults to the largest id plus one. The stream is stored
// once as int32 and the windows are views of it. What does not fit (a file
// of no whole ids, an id at or past vocab_size, a split shorter than a
// window) is a ConfigError naming the key, the file and what was expected.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <ATen/ATen.h>

#include "basin/core/serialization/torch_save_file.h"
#include "basin/datasets/token_windows.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

bool torch_saved(const fs::path& file) { return file.extension() == ".pt" || file.extension() == ".pth"; }

/// Raw little-endian ids of `width` bytes each, read a chunk at a time into
/// the int32 stream (the file's bytes are never held whole), each chunk
/// checked by `check(chunk as int64, its first position)`.
template <typename Check>
at::Tensor read_raw(const std::string& where, const fs::path& file, int width, const Check& check) {
  std::ifstream in(file, std::ios::binary);
  std::error_code error;
  const uintmax_t bytes = fs::file_size(file, error);
  if (!in || error) throw ConfigError(where + ": cannot read '" + file.string() + "': " + std::strerror(errno));
  if (bytes % static_cast<uintmax_t>(width) != 0) {
    throw ConfigError(where + ": '" + file.string() + "' holds " + std::to_string(bytes) +
                      " bytes, no whole number of " + std::to_string(width) + "-byte ids (data.dtype)");
  }
  const auto count = static_cast<int64_t>(bytes / static_cast<uintmax_t>(width));
  at::Tensor ids = at::empty({count}, at::kInt);
  constexpr int64_t kChunk = 1 << 20;
  std::vector<uint8_t> raw(static_cast<std::size_t>(kChunk * width));
  at::Tensor wide = at::empty({kChunk}, at::kLong);
  for (int64_t first = 0; first < count; first += kChunk) {
    const int64_t n = std::min(kChunk, count - first);
    if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(n * width))) {
      throw ConfigError(where + ": reading '" + file.string() + "' failed");
    }
    auto* out = wide.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      uint64_t id = 0;
      for (int b = width - 1; b >= 0; --b) id = (id << 8) | raw[static_cast<std::size_t>(i * width + b)];
      out[i] = static_cast<int64_t>(id);
    }
    const at::Tensor chunk = wide.slice(0, 0, n);
    check(chunk, first);
    ids.slice(0, first, first + n).copy_(chunk);
  }
  return ids;
}

at::Tensor read_saved(const std::string& key_path, const std::string& where, const fs::path& file) {
  const c10::IValue value = read_torch_save_file(file.string(), key_path);
  if (!value.isTensor()) throw ConfigError(where + ": '" + file.string() + "' holds no tensor; expected torch.save(ids) of a 1-D integer tensor");
  const at::Tensor ids = value.toTensor();
  if (!at::isIntegralType(ids.scalar_type(), /*includeBool=*/false) || ids.dim() != 1) {
    throw ConfigError(where + ": '" + file.string() + "' holds a " + std::string(c10::toString(ids.scalar_type())) +
                      " tensor of " + std::to_string(ids.dim()) + " dimension(s); expected a 1-D integer tensor of token ids");
  }
  return ids.to(at::kLong);
}

struct TokenReader {
  Params& params;
  int width;  // bytes per raw id
  int64_t vocabulary;  // 0: not given
  int64_t largest = -1;  // over every file read

  at::Tensor operator()(const std::string& key, const std::vector<fs::path>& files) {
    const std::string where = "config key '" + params.path_of(key) + "'";
    std::vector<at::Tensor> streams;
    for (const fs::path& file : files) {
      auto check = [&](const at::Tensor& ids, int64_t first) {
        if (ids.numel() > 0) check_ids(where, file, ids, first);
      };
      if (torch_saved(file)) {
        const at::Tensor ids = read_saved(params.path_of(key), where, file);
        check(ids, 0);
        streams.push_back(ids.to(at::kInt));
      } else {
        streams.push_back(read_raw(where, file, width, check));
      }
    }
    return streams.size() == 1 ? streams.front() : at::cat(streams);
  }

  /// `ids` (int64, from position `first` of `file`) below the vocabulary.
  void check_ids(const std::string& where, const fs::path& file, const at::Tensor& ids, int64_t first) {
    const int64_t low = ids.min().item<int64_t>(), high = ids.max().item<int64_t>();
    const int64_t limit = vocabulary > 0 ? vocabulary : std::numeric_limits<int32_t>::max();
    if (low < 0 || high >= limit) {
      const int64_t bad = low < 0 ? low : high;
      const int64_t at_index = first + ids.eq(bad).nonzero()[0][0].item<int64_t>();
      throw ConfigError(where + ": '" + file.string() + "' holds id " + std::to_string(bad) + " at position " +
                        std::to_string(at_index) + "; expected ids 0 to " + std::to_string(limit - 1) +
                        (vocabulary > 0 ? " (data.vocab_size " + std::to_string(vocabulary) + ")" : ""));
    }
    largest = std::max(largest, high);
  }
};

std::shared_ptr<DataSplits> token_file(Params& params, int64_t /*seed*/) {
  const std::string dtype = params.choice("dtype", "uint16", {"uint16", "uint32"});
  const int64_t vocabulary = params.integer("vocab_size", 0, 2, std::numeric_limits<int32_t>::max());
  TokenReader read{params, dtype == "uint16" ? 2 : 4, vocabulary};
  auto splits = std::make_shared<DataSplits>(token_windows::split_windows(params, std::ref(read), "tokens"));
  splits->info.num_classes = vocabulary > 0 ? vocabulary : std::max<int64_t>(read.largest + 1, 2);
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("tokens", token_file);

}  // namespace
}  // namespace basin
