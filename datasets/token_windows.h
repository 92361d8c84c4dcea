#pragma once

// What the language datasets ("text", "tokens") share: the files a key
// names, and one token stream cut into next-token windows.
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "basin/core/data/dataset.h"
#include "basin/core/data/token_stream.h"

namespace basin {
namespace token_windows {

/// The files `params[key]` names: a path, or a list of paths; a folder gives
/// its regular files sorted by name. A ConfigError names the key otherwise.
std::vector<std::filesystem::path> files_of(Params& params, const std::string& key);

/// "config key 'data.train': 'a.txt'" (and how many more files), for messages.
std::string named(const Params& params, const std::string& key, const std::vector<std::filesystem::path>& files);

/// `tokens` tiled with windows of block + 1, one every block tokens: x a
/// window's first block tokens, y the same shifted by one, cut from the
/// stream as batches are gathered. A ConfigError from `where` when `tokens`
/// is shorter than one window (`unit` names a token: "bytes", "tokens").
TensorDataset windows(const TokenStream& tokens, int64_t block, const std::string& where, const std::string& unit);

/// Reads a split's token stream from the files at `key` (a ConfigError names
/// the key and the file).
using StreamReader = std::function<TokenStream(const std::string& key, const std::vector<std::filesystem::path>& files)>;

/// The data section's "block_size", "train", and "test" or "test_fraction"
/// read into windowed splits: "test" files when given, else the last
/// test_fraction (default 0.1) of the train stream, which no training window
/// reaches. `unit` names a token in messages ("bytes", "tokens").
DataSplits split_windows(Params& params, const StreamReader& read, const std::string& unit);

}  // namespace token_windows
}  // namespace basin
