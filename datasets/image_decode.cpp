// image_folder's decode: the calling thread reads a split's files into a
// bounded queue, worker threads decode and transform each into its sample
// (SampleMaker, DecodeWorkers), rank 0 shows the progress (DecodeProgress),
// and the first failure by file order is reported (FirstFailure).
#include "basin/datasets/image_decode.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "basin/core/base/console.h"
#include "basin/core/config/config_error.h"
#include "basin/datasets/bounded_queue.h"
#include "basin/datasets/image_codec.h"

namespace basin {
namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

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

}  // namespace basin
