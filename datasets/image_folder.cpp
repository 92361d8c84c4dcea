// A folder of images per class, as torchvision's ImageFolder reads it:
//
//     dir/train/cat/0001.png  dir/train/dog/0001.jpg ...   dir/test/cat/...
//
//     {"data": {"name": "image_folder", "train": "dir/train", "test": "dir/test",
//               "channels": 3, "size": [32, 32], "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25],
//               "decode_threads": 0, "max_pixels": 178956970}}
//
// Every image is decoded once, before training, into memory (as floats):
// the data pipeline's rules (seeds, shuffling, train_subset, label noise,
// sharding across ranks, resume) then hold as for any other dataset, and
// every epoch after the decode costs nothing. A dataset larger than memory
// is not served here.
#include "basin/datasets/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <thread>

#include "basin/core/config/config_error.h"
#include "basin/datasets/image_decode.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

bool hidden(const fs::path& path) { return path.filename().string().rfind('.', 0) == 0; }

bool image_extension(const fs::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(), [](unsigned char c) { return std::tolower(c); });
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg";
}

std::vector<fs::path> sorted_entries(const fs::path& dir, bool folders) {
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (hidden(entry.path())) continue;
    if (folders ? entry.is_directory() : (entry.is_regular_file() && image_extension(entry.path()))) {
      entries.push_back(entry.path());
    }
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

/// The split's files, class by class; fills `classes` when it is empty.
std::vector<ImageFile> list_images(const std::string& dir, const std::string& where, std::vector<std::string>& classes) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) throw ConfigError(where + " is not a folder");
  const bool known = !classes.empty();
  std::vector<ImageFile> files;
  try {
    const auto folders = sorted_entries(dir, /*folders=*/true);
    if (folders.empty()) {
      throw ConfigError(where + " holds no class folders; expected one folder per class of PNG or JPEG files "
                        "(<folder>/<class>/<image>.png)");
    }
    for (const auto& folder : folders) {
      const std::string name = folder.filename().string();
      auto found = std::find(classes.begin(), classes.end(), name);
      if (found == classes.end()) {
        if (known) throw ConfigError(where + ": class folder '" + name + "' is not one of the training split's classes");
        classes.push_back(name);
        found = classes.end() - 1;
      }
      const auto images = sorted_entries(folder, /*folders=*/false);
      if (images.empty()) throw ConfigError(where + ": class folder '" + folder.string() + "' holds no .png, .jpg or .jpeg file");
      for (const auto& image : images) files.push_back({image.string(), found - classes.begin()});
    }
  } catch (const fs::filesystem_error& failure) {
    throw ConfigError(where + " cannot be listed: " + failure.code().message());
  }
  return files;
}

}  // namespace

ImageFolderSplit read_image_folder(const std::string& dir, const std::string& key, const ImageTransform& transform,
                                   int threads, const std::vector<std::string>& classes) {
  ImageFolderSplit split;
  split.classes = classes;
  const std::vector<ImageFile> files = list_images(dir, "config key '" + key + "': '" + dir + "'", split.classes);
  split.data = decode_images(files, key, transform, threads);
  return split;
}

namespace {

ImageTransform transform_from(Params& params) {
  ImageTransform transform;
  transform.channels = params.integer("channels", 3, 1, 3);
  if (transform.channels == 2) params.fail("channels", "1 (gray) or 3 (RGB)", Json(2));
  const Json size = params.raw("size");
  if (size.is_number_integer() && size.get<int64_t>() > 0) {
    transform.height = transform.width = size.get<int64_t>();
    transform.resize = true;
  } else if (size.is_array() && size.size() == 2 && size[0].is_number_integer() && size[1].is_number_integer() &&
             size[0].get<int64_t>() > 0 && size[1].get<int64_t>() > 0) {
    transform.height = size[0].get<int64_t>();
    transform.width = size[1].get<int64_t>();
    transform.resize = true;
  } else if (!size.is_null()) {
    params.fail("size", "a side in pixels (an integer > 0) or [height, width]", size);
  }
  auto per_channel_values = [&](const std::string& name, double fallback, bool positive) {
    const Json raw = params.raw(name);
    std::vector<double> values;
    if (raw.is_null()) return std::vector<double>{fallback};
    if (raw.is_number()) values = {raw.get<double>()};
    if (raw.is_array() && raw.size() == static_cast<std::size_t>(transform.channels) &&
        std::all_of(raw.begin(), raw.end(), [](const Json& v) { return v.is_number(); })) {
      values = raw.get<std::vector<double>>();
    }
    const bool fits = !values.empty() && std::all_of(values.begin(), values.end(), [&](double v) {
      return std::isfinite(v) && (!positive || v > 0);
    });
    if (!fits) {
      params.fail(name, std::string(positive ? "a number > 0" : "a number") + " or a list of " +
                            std::to_string(transform.channels) + " (one per channel)", raw);
    }
    return values;
  };
  transform.mean = per_channel_values("mean", 0.0, false);
  transform.std = per_channel_values("std", 1.0, true);
  transform.max_pixels = params.integer("max_pixels", kDefaultMaxImagePixels, 1, INT64_MAX);
  return transform;
}

std::shared_ptr<DataSplits> image_folder(Params& params, int64_t /*seed*/) {
  const ImageTransform transform = transform_from(params);
  const int64_t threads = params.integer("decode_threads", 0, 0, 1024);
  const int workers = threads > 0 ? static_cast<int>(threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string train_dir = params.string("train"), test_dir = params.string("test");
  // Both splits listed before any decoding: a folder that does not fit fails at once.
  std::vector<std::string> classes;
  const auto train_files = list_images(train_dir, "config key '" + params.path_of("train") + "': '" + train_dir + "'", classes);
  if (classes.size() < 2) {
    throw ConfigError("config key '" + params.path_of("train") + "': '" + train_dir + "' holds one class folder ('" +
                      classes[0] + "'); a classifier needs at least 2");
  }
  const auto test_files = list_images(test_dir, "config key '" + params.path_of("test") + "': '" + test_dir + "'", classes);
  TensorDataset train = decode_images(train_files, params.path_of("train"), transform, workers);
  // The test split takes the training split's sample size.
  ImageTransform test_transform = transform;
  test_transform.height = train.inputs().size(2);
  test_transform.width = train.inputs().size(3);
  TensorDataset test = decode_images(test_files, params.path_of("test"), test_transform, workers);
  auto splits = std::make_shared<DataSplits>();
  const auto sample = train.inputs().sizes().slice(1).vec();
  splits->train = std::move(train);
  splits->test = std::move(test);
  splits->info = DatasetInfo{sample, static_cast<int64_t>(classes.size())};
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("image_folder", image_folder);

}  // namespace
}  // namespace basin
