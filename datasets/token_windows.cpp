#include "basin/datasets/token_windows.h"

#include <algorithm>

namespace basin {
namespace token_windows {

namespace fs = std::filesystem;

std::vector<fs::path> files_of(Params& params, const std::string& key) {
  const Json value = params.raw(key);
  std::vector<std::string> listed;
  if (value.is_string()) {
    listed.push_back(value.get<std::string>());
  } else if (value.is_array() && !value.empty() &&
             std::all_of(value.begin(), value.end(), [](const Json& v) { return v.is_string(); })) {
    for (const Json& v : value) listed.push_back(v.get<std::string>());
  } else {
    params.fail(key, "a file, a folder or a list of them", value);
  }
  std::vector<fs::path> files;
  for (const std::string& name : listed) {
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

std::string named(const Params& params, const std::string& key, const std::vector<fs::path>& files) {
  std::string text = "config key '" + params.path_of(key) + "': '" + files.front().string() + "'";
  if (files.size() > 1) text += " and " + std::to_string(files.size() - 1) + " more file(s)";
  return text;
}

TensorDataset windows(const TokenStream& tokens, int64_t block, const std::string& where, const std::string& unit) {
  if (tokens.size() < block + 1) {
    throw ConfigError(where + " holds " + std::to_string(tokens.size()) + " " + unit +
                      "; expected at least block_size + 1 = " + std::to_string(block + 1));
  }
  return TensorDataset(tokens, block);
}

DataSplits split_windows(Params& params, const StreamReader& read, const std::string& unit) {
  const int64_t block = params.integer("block_size", 0, 1);
  if (block == 0) params.fail("block_size", "a positive number of " + unit + " per window", params.raw("block_size"));
  if (!params.has("train")) params.fail("train", "a file, a folder or a list of them", Json());
  const auto train_files = files_of(params, "train");
  TokenStream train = read("train", train_files);
  DataSplits splits;
  if (params.has("test")) {
    const auto test_files = files_of(params, "test");
    splits.test = windows(read("test", test_files), block, named(params, "test", test_files), unit);
  } else {
    const double fraction = params.number("test_fraction", 0.1, 0.0, 1.0);
    const auto held = static_cast<int64_t>(static_cast<double>(train.size()) * fraction);
    if (fraction <= 0.0 || fraction >= 1.0 || held < block + 1) {
      throw ConfigError("config key '" + params.path_of("test_fraction") + "': " + std::to_string(fraction) + " of " +
                        std::to_string(train.size()) + " " + unit + " holds " + std::to_string(held) +
                        " for the test split; expected between 0 and 1, and at least block_size + 1 = " +
                        std::to_string(block + 1) + " " + unit + " (or give \"test\" files)");
    }
    const int64_t kept = train.size() - held;
    splits.test = windows(train.slice(kept, train.size()), block,
                          named(params, "train", train_files) + "'s last " + std::to_string(held) + " " + unit, unit);
    train = train.slice(0, kept);
  }
  splits.train = windows(train, block, named(params, "train", train_files), unit);
  splits.info.input_shape = {block};
  return splits;
}

}  // namespace token_windows
}  // namespace basin
