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
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include <ATen/ATen.h>

#include "basin/core/serialization/torch_save_file.h"
#include "basin/datasets/token_windows.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

bool torch_saved(const fs::path& file) { return file.extension() == ".pt" || file.extension() == ".pth"; }

/// Raw little-endian ids of `width` bytes each, as int64 (then checked and narrowed).
at::Tensor read_raw(const std::string& where, const fs::path& file, int width) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(where + ": cannot read '" + file.string() + "': " + std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ConfigError(where + ": reading '" + file.string() + "' failed");
  if (bytes.size() % static_cast<std::size_t>(width) != 0) {
    throw ConfigError(where + ": '" + file.string() + "' holds " + std::to_string(bytes.size()) +
                      " bytes, no whole number of " + std::to_string(width) + "-byte ids (data.dtype)");
  }
  const auto count = static_cast<int64_t>(bytes.size() / static_cast<std::size_t>(width));
  at::Tensor ids = at::empty({count}, at::kLong);
  auto* out = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    uint64_t id = 0;
    for (int b = width - 1; b >= 0; --b) id = (id << 8) | bytes[static_cast<std::size_t>(i * width + b)];
    out[i] = static_cast<int64_t>(id);
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
      at::Tensor ids = torch_saved(file) ? read_saved(params.path_of(key), where, file) : read_raw(where, file, width);
      if (ids.numel() > 0) check_ids(where, file, ids);
      streams.push_back(ids.to(at::kInt));
    }
    return at::cat(streams);
  }

  void check_ids(const std::string& where, const fs::path& file, const at::Tensor& ids) {
    const int64_t low = ids.min().item<int64_t>(), high = ids.max().item<int64_t>();
    const int64_t limit = vocabulary > 0 ? vocabulary : std::numeric_limits<int32_t>::max();
    if (low < 0 || high >= limit) {
      const int64_t bad = low < 0 ? low : high;
      const int64_t at_index = ids.eq(bad).nonzero()[0][0].item<int64_t>();
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
