// A folder of images per class, as torchvision's ImageFolder reads it:
//
//     dir/train/cat/0001.png  dir/train/dog/0001.jpg ...   dir/test/cat/...
//
//     {"data": {"name": "image_folder", "train": "dir/train", "test": "dir/test",
//               "channels": 3, "size": [32, 32], "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25],
//               "decode_threads": 0}}
//
// Every image is decoded once, before training, into memory (as floats):
// the data pipeline's rules (seeds, shuffling, train_subset, label noise,
// sharding across ranks, resume) then hold as for any other dataset, and
// every epoch after the decode costs nothing. A dataset larger than memory
// is not served here.
#include "basin/examples/data/image_folder.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>

#include "basin/core/config_error.h"
#include "basin/core/console.h"
#include "basin/examples/data/bounded_queue.h"
#include "basin/examples/data/image_codec.h"

namespace basin {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct ImageFile {
  std::string path;
  int64_t label = 0;
};

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

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw ImageDecodeError("cannot be read");
  if (bytes.empty()) throw ImageDecodeError("is empty");
  return bytes;
}

at::Tensor per_channel(const std::vector<double>& values, int64_t channels) {
  at::Tensor t = at::tensor(values, at::kDouble).to(at::kFloat);
  return (values.size() == 1 ? t.expand({channels}) : t).reshape({channels, 1, 1}).contiguous();
}

/// Decodes one image and writes its sample into `out`.
class SampleMaker {
 public:
  explicit SampleMaker(const ImageTransform& transform)
      : transform_(transform), mean_(per_channel(transform.mean, transform.channels)),
        std_(per_channel(transform.std, transform.channels)) {}

  void operator()(const std::vector<uint8_t>& bytes, at::Tensor out) const {
    Image image = decode_image(bytes.data(), bytes.size(), transform_.channels);
    if (image.height == 0 || image.width == 0) throw ImageDecodeError("has no pixels");
    const at::Tensor pixels = at::from_blob(image.pixels.data(), {image.height, image.width, image.channels}, at::kByte);
    // Contiguous, as Python's torch.from_numpy(a).permute(2, 0, 1).contiguous(): the resize's kernel follows the layout.
    at::Tensor x = pixels.permute({2, 0, 1}).contiguous().to(at::kFloat).div_(255);
    if (image.height != transform_.height || image.width != transform_.width) {
      if (!transform_.resize) {
        throw ImageDecodeError("is " + std::to_string(image.height) + "x" + std::to_string(image.width) + ", not " +
                               std::to_string(transform_.height) + "x" + std::to_string(transform_.width) +
                               " as the first training image; set data.size to resize every image");
      }
      x = at::upsample_bilinear2d(x.unsqueeze(0), {transform_.height, transform_.width}, /*align_corners=*/false,
                                  c10::nullopt, c10::nullopt)
              .squeeze(0);
    }
    out.copy_(x.sub_(mean_).div_(std_));
  }


 private:
  ImageTransform transform_;
  at::Tensor mean_, std_;
};

/// The decode's progress line, on rank 0: redrawn in place on a terminal,
/// a log line every 10 s elsewhere, and the rate at the end.
class DecodeProgress {
 public:
  DecodeProgress(std::string label, int64_t total, int threads)
      : label_(std::move(label)), total_(total), threads_(threads), start_(Clock::now()), last_(start_) {
    const char* rank = std::getenv("RANK");
    shown_ = rank == nullptr || std::string(rank) == "0";
    terminal_ = isatty(fileno(stderr)) != 0;
  }

  void update(int64_t done) {
    if (!shown_) return;
    const auto now = Clock::now();
    if (now - last_ < (terminal_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(10000))) return;
    last_ = now;
    const std::string text = label_ + ": decoded " + std::to_string(done) + "/" + std::to_string(total_) + " images (" +
                             rate(done, now) + ")";
    if (terminal_) {
      std::fprintf(stderr, "\r%s\033[K", text.c_str());
      std::fflush(stderr);
      drawn_ = true;
    } else {
      console::info(text);
    }
  }

  void finish() {
    if (!shown_) return;
    if (drawn_) std::fprintf(stderr, "\r\033[K");
    console::info(label_ + ": decoded " + std::to_string(total_) + " images (" + rate(total_, Clock::now()) + " on " +
                  std::to_string(threads_) + (threads_ == 1 ? " thread)" : " threads)"));
  }

 private:
  std::string rate(int64_t done, Clock::time_point now) const {
    const double seconds = std::chrono::duration<double>(now - start_).count();
    char text[64];
    std::snprintf(text, sizeof text, "%.0f images/s, %.1f s", seconds > 0 ? static_cast<double>(done) / seconds : 0.0, seconds);
    return text;
  }

  std::string label_;
  int64_t total_;
  int threads_;
  Clock::time_point start_, last_;
  bool shown_ = false, terminal_ = false, drawn_ = false;
};

struct EncodedImage {
  int64_t index = 0;
  std::vector<uint8_t> bytes;
};

/// The first failure by file order, whichever worker met it first.
class FirstFailure {
 public:
  void record(int64_t index, std::string message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (index < index_) {
      index_ = index;
      message_ = std::move(message);
    }
    failed_ = true;
  }
  bool failed() const { return failed_; }
  int64_t index() const { return index_; }
  const std::string& message() const { return message_; }

 private:
  std::mutex mutex_;
  std::atomic<bool> failed_{false};
  int64_t index_ = INT64_MAX;
  std::string message_;
};

}  // namespace

ImageFolderSplit read_image_folder(const std::string& dir, const std::string& key, const ImageTransform& given,
                                   int threads, const std::vector<std::string>& classes) {
  const std::string where = "config key '" + key + "': '" + dir + "'";
  ImageFolderSplit split;
  split.classes = classes;
  const std::vector<ImageFile> files = list_images(dir, where, split.classes);
  auto fail = [&](const ImageFile& file, const std::string& reason) -> ConfigError {
    return ConfigError("config key '" + key + "': image '" + file.path + "' " + reason);
  };

  ImageTransform transform = given;
  if (transform.height == 0) {
    // No size given: the first image sets it, and every other must have it.
    try {
      const auto bytes = read_bytes(files[0].path);
      const Image image = decode_image(bytes.data(), bytes.size(), transform.channels);
      transform.height = image.height;
      transform.width = image.width;
    } catch (const ImageDecodeError& error) {
      throw fail(files[0], error.what());
    }
  }
  const auto count = static_cast<int64_t>(files.size());
  at::Tensor inputs = at::empty({count, transform.channels, transform.height, transform.width}, at::kFloat);
  const SampleMaker make(transform);

  const int workers = std::max(1, std::min<int>(threads, static_cast<int>(count)));
  BoundedQueue<EncodedImage> queue(2 * static_cast<std::size_t>(workers));
  FirstFailure failure;
  std::atomic<int64_t> decoded{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      at::NoGradGuard no_grad;
      while (auto item = queue.pop()) {
        if (failure.failed()) continue;  // drain: the reader stops at the first failure
        try {
          make(item->bytes, inputs.select(0, item->index));
        } catch (const std::exception& error) {
          failure.record(item->index, error.what());
        }
        ++decoded;
      }
    });
  }
  DecodeProgress progress(key, count, workers);
  for (int64_t i = 0; i < count && !failure.failed(); ++i) {
    try {
      queue.push({i, read_bytes(files[i].path)});
    } catch (const ImageDecodeError& error) {
      failure.record(i, error.what());
    }
    progress.update(decoded.load());
  }
  queue.close();
  for (auto& worker : pool) worker.join();
  if (failure.failed()) throw fail(files[failure.index()], failure.message());
  progress.finish();

  std::vector<int64_t> labels;
  labels.reserve(files.size());
  for (const auto& file : files) labels.push_back(file.label);
  split.data = TensorDataset(inputs, at::tensor(labels, at::kLong));
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
  return transform;
}

std::shared_ptr<DataSplits> image_folder(Params& params, int64_t /*seed*/) {
  const ImageTransform transform = transform_from(params);
  const int64_t threads = params.integer("decode_threads", 0, 0, 1024);
  const int workers = threads > 0 ? static_cast<int>(threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string train_dir = params.string("train"), test_dir = params.string("test");
  ImageFolderSplit train = read_image_folder(train_dir, params.path_of("train"), transform, workers);
  if (train.classes.size() < 2) {
    throw ConfigError("config key '" + params.path_of("train") + "': '" + train_dir + "' holds one class folder ('" +
                      train.classes[0] + "'); a classifier needs at least 2");
  }
  // The test split takes the training split's classes and sample size.
  ImageTransform test_transform = transform;
  test_transform.height = train.data.inputs().size(2);
  test_transform.width = train.data.inputs().size(3);
  ImageFolderSplit test = read_image_folder(test_dir, params.path_of("test"), test_transform, workers, train.classes);
  auto splits = std::make_shared<DataSplits>();
  const auto sample = train.data.inputs().sizes().slice(1).vec();
  splits->train = std::move(train.data);
  splits->test = std::move(test.data);
  splits->info = DatasetInfo{sample, static_cast<int64_t>(train.classes.size())};
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("image_folder", image_folder);

}  // namespace
}  // namespace basin
