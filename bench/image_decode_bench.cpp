// Image decoding for "data": {"name": "image_folder"}: images per second per
// thread, and the whole folder read (file reads, decode, resize, normalize)
// at 1 and 2 decode threads.
//   - Decode/<format>/<side>/<channels>: decode_image alone, one thread;
//     the images are noise with smooth gradients (JPEG quality 90, PNG at
//     libpng's default compression), so their sizes are a photo's, roughly
//   - ReadImageFolder/<side>/<threads>: 512 JPEGs of side x side RGB resized
//     to half the side, from the page cache (written before the clock runs)
// LibTorch runs one intra-op thread (BASIN_BENCH_THREADS, default 1).
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "basin/core/base/blas.h"
#include "basin/datasets/image_codec.h"
#include "basin/datasets/image_folder.h"

namespace {

namespace fs = std::filesystem;

basin::Image picture(int64_t side, int64_t channels, int seed) {
  basin::Image image{side, side, channels, {}};
  std::srand(static_cast<unsigned>(seed));
  for (int64_t y = 0; y < side; ++y) {
    for (int64_t x = 0; x < side; ++x) {
      for (int64_t c = 0; c < channels; ++c) {
        const double smooth = 127 + 100 * std::sin(0.1 * (x + seed) + 0.07 * y * (c + 1));
        image.pixels.push_back(static_cast<uint8_t>(std::clamp(smooth + std::rand() % 17 - 8, 0.0, 255.0)));
      }
    }
  }
  return image;
}

void Decode(benchmark::State& state, bool jpeg) {
  const basin::Image image = picture(state.range(0), state.range(1), 1);
  const std::vector<uint8_t> bytes = jpeg ? basin::encode_jpeg(image, 90) : basin::encode_png(image);
  for (auto _ : state) benchmark::DoNotOptimize(basin::decode_image(bytes.data(), bytes.size(), image.channels));
  state.SetItemsProcessed(state.iterations());
  state.counters["file_bytes"] = static_cast<double>(bytes.size());
}
BENCHMARK_CAPTURE(Decode, png, false)->Args({28, 1})->Args({32, 3})->Args({224, 3})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(Decode, jpeg, true)->Args({28, 1})->Args({32, 3})->Args({224, 3})->Unit(benchmark::kMicrosecond);

/// 512 JPEGs of `side` x `side` in 4 class folders under the temp dir, written once a side.
std::string folder(int64_t side) {
  const fs::path dir = fs::temp_directory_path() / ("basin-bench-images-" + std::to_string(getpid()) + "-" + std::to_string(side));
  if (fs::exists(dir)) return dir.string();
  for (int i = 0; i < 512; ++i) {
    const fs::path path = dir / ("c" + std::to_string(i % 4)) / (std::to_string(i) + ".jpg");
    fs::create_directories(path.parent_path());
    const auto bytes = basin::encode_jpeg(picture(side, 3, i), 90);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  return dir.string();
}

void ReadImageFolder(benchmark::State& state) {
  basin::ImageTransform transform;
  transform.height = transform.width = state.range(0) / 2;
  transform.resize = true;
  setenv("RANK", "1", 1);  // rank 0 alone shows the progress line: none in the benchmark's output
  const std::string root = folder(state.range(0));  // written before the clock runs
  for (auto _ : state) {
    benchmark::DoNotOptimize(basin::read_image_folder(root, "bench", transform, static_cast<int>(state.range(1))));
  }
  state.SetItemsProcessed(state.iterations() * 512);
  std::error_code ignored;
  fs::remove_all(root, ignored);
}
BENCHMARK(ReadImageFolder)->Args({96, 1})->Args({96, 2})->Args({256, 1})->Args({256, 2})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  const char* threads = std::getenv("BASIN_BENCH_THREADS");
  basin::set_compute_threads(threads ? std::atoi(threads) : 1);
  benchmark::AddCustomContext("intra-op threads", std::to_string(at::get_num_threads()));
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
