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
#include <functional>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

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

/// Calls f(begin, end) over row ranges of a [rows, columns] plane small
/// enough that no elementwise LibTorch kernel splits them across threads:
/// the decode workers are the parallelism (a worker's own thread gets
/// OpenMP's default team, every core, not the run's thread count). The
/// resize may still use a thread per channel on large images.
template <class F>
void in_serial_pieces(int64_t rows, int64_t columns, const F& f) {
  const int64_t step = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, columns));
  for (int64_t begin = 0; begin < rows; begin += step) f(begin, std::min(rows, begin + step));
}

/// Decodes one image and writes its sample into `out`: the same values as
/// Python's whole-tensor operations. The elementwise ones run one channel
/// plane at a time, in pieces (each is correctly rounded, so pieces change
/// no bit); the resize runs on all planes at once, as interpolate does (its
/// kernel rounds otherwise plane by plane).
class SampleMaker {
 public:
  explicit SampleMaker(const ImageTransform& transform)
      : transform_(transform), mean_(per_channel(transform.mean, transform.channels)),
        std_(per_channel(transform.std, transform.channels)) {}

  void operator()(const std::vector<uint8_t>& bytes, at::Tensor out) const {
    Image image = decode_image(bytes.data(), bytes.size(), transform_.channels, transform_.max_pixels);
    if (image.height == 0 || image.width == 0) throw ImageDecodeError("has no pixels");
    const bool resize = image.height != transform_.height || image.width != transform_.width;
    if (resize && !transform_.resize) {
      throw ImageDecodeError("is " + std::to_string(image.height) + "x" + std::to_string(image.width) + ", not " +
                             std::to_string(transform_.height) + "x" + std::to_string(transform_.width) +
                             " as the first training image; set data.size to resize every image");
    }
    const at::Tensor pixels = at::from_blob(image.pixels.data(), {image.height, image.width, image.channels}, at::kByte);
    at::Tensor x = resize ? at::empty({transform_.channels, image.height, image.width}, at::kFloat) : out;
    for (int64_t c = 0; c < transform_.channels; ++c) {
      in_serial_pieces(image.height, image.width, [&](int64_t begin, int64_t end) {
        x.select(0, c).slice(0, begin, end).copy_(pixels.select(2, c).slice(0, begin, end)).div_(255);
      });
    }
    if (resize) {
      out.copy_(at::upsample_bilinear2d(x.unsqueeze(0), {transform_.height, transform_.width}, /*align_corners=*/false,
                                        c10::nullopt, c10::nullopt)
                    .squeeze(0));
    }
    for (int64_t c = 0; c < transform_.channels; ++c) {
      in_serial_pieces(transform_.height, transform_.width, [&](int64_t begin, int64_t end) {
        out.select(0, c).slice(0, begin, end).sub_(mean_[c]).div_(std_[c]);
      });
    }
  }

 private:
  ImageTransform transform_;
  at::Tensor mean_, std_;  // [channels, 1, 1]
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
  /// Whether item `index` can no longer be the first failure.
  bool passed(int64_t index) {
    std::lock_guard<std::mutex> lock(mutex_);
    return index > index_;
  }
  int64_t index() const { return index_; }
  const std::string& message() const { return message_; }

 private:
  std::mutex mutex_;
  std::atomic<bool> failed_{false};
  int64_t index_ = INT64_MAX;
  std::string message_;
};

/// Workers that decode from `queue` until it is closed and drained; the
/// destructor closes it and joins them, whatever the reader threw.
class DecodeWorkers {
 public:
  DecodeWorkers(BoundedQueue<EncodedImage>& queue, int count, const std::function<void(EncodedImage&)>& decode)
      : queue_(queue) {
    for (int w = 0; w < count; ++w) {
      threads_.emplace_back([this, decode] {
        at::NoGradGuard no_grad;
        while (auto item = queue_.pop()) decode(*item);
      });
    }
  }
  ~DecodeWorkers() { join(); }
  void join() {
    queue_.close();
    for (auto& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

 private:
  BoundedQueue<EncodedImage>& queue_;
  std::vector<std::thread> threads_;
};

std::string message_of(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  return c10_error != nullptr ? c10_error->what_without_backtrace() : error.what();  // one line, no backtrace
}

/// The files' samples, decoded by `threads` workers.
TensorDataset decode_images(const std::vector<ImageFile>& files, const std::string& key, ImageTransform transform,
                            int threads) {
  auto fail = [&](const ImageFile& file, const std::string& reason) -> ConfigError {
    return ConfigError("config key '" + key + "': image '" + file.path + "' " + reason);
  };
  const std::string limit_key = key.substr(0, key.rfind('.') + 1) + "max_pixels";
  const std::string raise_the_limit = "; set " + limit_key + " to read larger images (default " +
                                      std::to_string(kDefaultMaxImagePixels) + ", Pillow's)";
  if (transform.height == 0) {
    // No size given: the first image sets it, and every other must have it.
    try {
      const auto bytes = read_bytes(files[0].path);
      const Image image = decode_image(bytes.data(), bytes.size(), transform.channels, transform.max_pixels);
      transform.height = image.height;
      transform.width = image.width;
    } catch (const ImageTooLargeError& error) {
      throw fail(files[0], error.what() + raise_the_limit);
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
  {
    DecodeWorkers pool(queue, workers, [&](EncodedImage& item) {
      if (!failure.passed(item.index)) {  // after a failure, only earlier files can still come first
        try {
          make(item.bytes, inputs.select(0, item.index));
        } catch (const ImageTooLargeError& error) {
          failure.record(item.index, error.what() + raise_the_limit);
        } catch (const std::exception& error) {
          failure.record(item.index, message_of(error));
        }
      }
      ++decoded;
    });
    DecodeProgress progress(key, count, workers);
    for (int64_t i = 0; i < count && !failure.failed(); ++i) {
      try {
        queue.push({i, read_bytes(files[i].path)});
      } catch (const ImageDecodeError& error) {
        failure.record(i, error.what());
      }
      progress.update(decoded.load());
    }
    pool.join();
    if (failure.failed()) throw fail(files[failure.index()], failure.message());
    progress.finish();
  }
  std::vector<int64_t> labels;
  labels.reserve(files.size());
  for (const auto& file : files) labels.push_back(file.label);
  return TensorDataset(inputs, at::tensor(labels, at::kLong));
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
