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
// "vocab_size" defaults to the largest id plus one. Raw files are
// memory-mapped as they lie on disk, and windows are cut from the mapping as
// batches are gathered; their ids are checked once, read a chunk at a time
// (not through the mapping, whose pages would stay with the process). What
// does not fit (a file of no whole ids, an id at or past vocab_size, a split
// shorter than a window) is a ConfigError naming the key, the file and what
// was expected.
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

/// Checks the raw little-endian ids of `width` bytes each in `file`, read a
/// chunk at a time: `check(ids, count, first position)` on each chunk.
/// Returns how many ids it checked.
template <typename Check>
int64_t check_raw(const std::string& where, const fs::path& file, int width, const Check& check) {
  std::ifstream in(file, std::ios::binary);
  std::error_code error;
  const uintmax_t bytes = fs::file_size(file, error);
  if (!in || error) throw ConfigError(where + ": cannot read '" + file.string() + "': " + std::strerror(errno));
  if (bytes % static_cast<uintmax_t>(width) != 0) {
    throw ConfigError(where + ": '" + file.string() + "' holds " + std::to_string(bytes) +
                      " bytes, no whole number of " + std::to_string(width) + "-byte ids (data.dtype)");
  }
  const auto count = static_cast<int64_t>(bytes / static_cast<uintmax_t>(width));
  constexpr int64_t kChunk = 1 << 20;
  std::vector<uint8_t> raw(static_cast<std::size_t>(kChunk * width));
  std::vector<int64_t> ids(static_cast<std::size_t>(kChunk));
  for (int64_t first = 0; first < count; first += kChunk) {
    const int64_t n = std::min(kChunk, count - first);
    if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(n * width))) {
      throw ConfigError(where + ": reading '" + file.string() + "' failed");
    }
    for (int64_t i = 0; i < n; ++i) {
      uint64_t id = 0;
      for (int b = width - 1; b >= 0; --b) id = (id << 8) | raw[static_cast<std::size_t>(i * width + b)];
      ids[static_cast<std::size_t>(i)] = static_cast<int64_t>(id);
    }
    check(ids.data(), n, first);
  }
  return count;
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
  TokenType type;  // of raw ids
  int64_t vocabulary;  // 0: not given
  int64_t largest = -1;  // over every file read

  TokenStream operator()(const std::string& key, const std::vector<fs::path>& files) {
    const std::string where = "config key '" + params.path_of(key) + "'";
    TokenStream stream;
    for (const fs::path& file : files) {
      auto check = [&](const int64_t* ids, int64_t count, int64_t first) { check_ids(where, file, ids, count, first); };
      if (torch_saved(file)) {
        const at::Tensor ids = read_saved(params.path_of(key), where, file).contiguous();
        check(ids.data_ptr<int64_t>(), ids.numel(), 0);
        stream.append(ids);
        continue;
      }
      const int64_t checked = check_raw(where, file, type == TokenType::kUint16 ? 2 : 4, check);
      const int64_t before = stream.size();
      try {
        stream.append_file(file, type);
      } catch (const std::runtime_error& unmapped) {
        throw ConfigError(where + ": " + unmapped.what());
      }
      if (stream.size() - before != checked) {
        throw ConfigError(where + ": '" + file.string() + "' changed while it was read (" + std::to_string(checked) +
                          " ids checked, " + std::to_string(stream.size() - before) +
                          " mapped): corpus files must not change while a job reads them");
      }
    }
    return stream;
  }

  /// `count` ids, from position `first` of `file`, below the vocabulary.
  void check_ids(const std::string& where, const fs::path& file, const int64_t* ids, int64_t count, int64_t first) {
    const int64_t limit = vocabulary > 0 ? vocabulary : std::numeric_limits<int32_t>::max();
    for (int64_t i = 0; i < count; ++i) {
      if (ids[i] >= 0 && ids[i] < limit) continue;
      throw ConfigError(where + ": '" + file.string() + "' holds id " + std::to_string(ids[i]) + " at position " +
                        std::to_string(first + i) + "; expected ids 0 to " + std::to_string(limit - 1) +
                        (vocabulary > 0 ? " (data.vocab_size " + std::to_string(vocabulary) + ")" : ""));
    }
    if (count > 0) largest = std::max(largest, *std::max_element(ids, ids + count));
  }
};

std::shared_ptr<DataSplits> token_file(Params& params, int64_t /*seed*/) {
  const std::string dtype = params.choice("dtype", "uint16", {"uint16", "uint32"});
  const int64_t vocabulary = params.integer("vocab_size", 0, 2, std::numeric_limits<int32_t>::max());
  TokenReader read{params, dtype == "uint16" ? TokenType::kUint16 : TokenType::kUint32, vocabulary};
  auto splits = std::make_shared<DataSplits>(token_windows::split_windows(params, std::ref(read), "tokens"));
  splits->info.num_classes = vocabulary > 0 ? vocabulary : std::max<int64_t>(read.largest + 1, 2);
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("tokens", token_file);

}  // namespace
}  // namespace basin
