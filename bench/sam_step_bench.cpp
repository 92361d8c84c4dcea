// Cost of SAM against the plain optimizer it wraps, on a model of
// models/ (Fashion-MNIST shapes, batch 128). This machine's timings drift
// by tens of percent between runs, so every ratio comes from *interleaved*
// pairs: each iteration times one SGD step and one SAM step back to back,
// and the reported figure is the median of the per-pair ratios.
//   - TrainStep:     SAM(SGD-momentum) step / SGD-momentum step (floor 2.0: two passes)
//   - OptimizerSide: SAM's own work (norm, perturb, swap, restore) / one base
//                    SGD-momentum step, gradients fixed and closures empty
//   - peak memory of training, SAM over SGD, in copies of the parameters (CPU only)
// Threads: BASIN_BENCH_THREADS (default 1); device: BASIN_BENCH_DEVICE, cpu
// (default) or cuda, where each clock read waits for the GPU; model:
// BASIN_BENCH_MODEL, cnn (default) or resnet. All three are in the context.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/base/blas.h"
#include "basin/core/model/model.h"
#include "tracking_allocator.h"

namespace {

constexpr int64_t kBatch = 128;
using Clock = std::chrono::steady_clock;

// Chosen in main() from the environment, before any benchmark runs.
c10::Device bench_device(c10::kCPU);
std::string bench_model = "cnn";

// Reads the clock once the device has finished the work queued so far.
Clock::time_point now() {
  if (bench_device.is_cuda()) torch::cuda::synchronize();
  return Clock::now();
}

struct Setup {
  std::shared_ptr<basin::Model> model;
  at::Tensor inputs, targets;
  std::shared_ptr<torch::optim::Optimizer> optimizer;

  explicit Setup(bool sam) {
    at::manual_seed(0);
    basin::Params params(basin::Json::object(), "model");
    model = basin::model_registry().create(bench_model, params, basin::DatasetInfo{{1, 28, 28}, 10});
    model->to(bench_device);
    inputs = at::randn({kBatch, 1, 28, 28}, at::device(bench_device));
    targets = at::randint(0, 10, {kBatch}, at::device(bench_device).dtype(at::kLong));
    auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    optimizer = sam ? std::static_pointer_cast<torch::optim::Optimizer>(std::make_shared<basin::SAMOptimizer>(sgd)) : sgd;
  }

  at::Tensor closure() {
    optimizer->zero_grad();
    at::Tensor loss = at::cross_entropy_loss(model->forward(inputs), targets);
    loss.backward();
    return loss.detach();
  }

  size_t parameter_bytes() const {
    size_t bytes = 0;
    for (const auto& p : model->parameters()) bytes += p.numel() * p.element_size();
    return bytes;
  }
};

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Times `first` and `second` back to back per iteration; reports both medians
// and the median ratio second/first (or (second-first)/first when `excess`).
template <class First, class Second>
void interleaved(benchmark::State& state, First first, Second second, bool excess) {
  std::vector<double> a, b, ratios;
  first();  // warm-up: first steps allocate optimizer state and SAM's buffers
  second();
  for (auto _ : state) {
    const auto t0 = now();
    first();
    const auto t1 = now();
    second();
    const auto t2 = now();
    a.push_back(seconds(t0, t1));
    b.push_back(seconds(t1, t2));
    ratios.push_back(excess ? (b.back() - a.back()) / a.back() : b.back() / a.back());
    state.SetIterationTime(a.back() + b.back());
  }
  state.counters["sgd_ms"] = median(a) * 1e3;
  state.counters["sam_ms"] = median(b) * 1e3;
  state.counters["ratio"] = median(ratios);
}

void BM_TrainStep_SGD_vs_SAM(benchmark::State& state) {
  Setup sgd(false), sam(true);
  interleaved(
      state, [&] { sgd.optimizer->step([&] { return sgd.closure(); }); },
      [&] { sam.optimizer->step([&] { return sam.closure(); }); }, /*excess=*/false);
}

// Gradients fixed once, closures empty: the SAM step is SAM's own work plus
// one base step, so (SAM - SGD) / SGD is SAM's optimizer-side overhead.
void BM_OptimizerSide_SGD_vs_SAM(benchmark::State& state) {
  Setup sgd(false), sam(true);
  for (Setup* s : {&sgd, &sam}) {
    for (const auto& p : s->model->parameters()) p.mutable_grad() = at::randn_like(p) * 1e-3;
  }
  const at::Tensor loss = at::zeros({}, at::device(bench_device));
  interleaved(
      state, [&] { sgd.optimizer->step(); }, [&] { sam.optimizer->step([&] { return loss; }); }, /*excess=*/true);
}

BENCHMARK(BM_TrainStep_SGD_vs_SAM)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(30);
BENCHMARK(BM_OptimizerSide_SGD_vs_SAM)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(2000);

// Peak bytes held over the first two steps, above what model and data held
// before: activations, gradients, optimizer state and (for SAM) its buffers.
size_t training_peak_bytes(bool sam) {
  auto& tracker = basin::bench::TrackingAllocator::install();
  Setup s(sam);
  tracker.reset_peak();
  const size_t before = tracker.current();
  for (int i = 0; i < 2; ++i) s.optimizer->step([&] { return s.closure(); });
  return tracker.peak() - before;
}

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const char* threads_env = std::getenv("BASIN_BENCH_THREADS");
  basin::set_compute_threads(threads_env != nullptr ? std::atoi(threads_env) : 1);
  const std::string device_name = env_or("BASIN_BENCH_DEVICE", "cpu");
  bench_model = env_or("BASIN_BENCH_MODEL", "cnn");
  if (device_name == "cuda") {
    if (!torch::cuda::is_available()) {
      std::cerr << "BASIN_BENCH_DEVICE=cuda, but this LibTorch has no CUDA or sees no GPU" << std::endl;
      return 2;
    }
    bench_device = c10::Device(c10::kCUDA);
  } else if (device_name != "cpu") {
    std::cerr << "BASIN_BENCH_DEVICE='" << device_name << "': expected cpu or cuda" << std::endl;
    return 2;
  }
  if (bench_model != "cnn" && bench_model != "resnet") {
    std::cerr << "BASIN_BENCH_MODEL='" << bench_model << "': expected cnn or resnet" << std::endl;
    return 2;
  }
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("device", device_name);
  benchmark::AddCustomContext("model", bench_model);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();

  if (bench_device.is_cuda()) {
    // The tracking allocator sees CPU memory only, and CUDA's own statistics
    // (c10/cuda/CUDACachingAllocator.h) need c10_cuda, which a CPU LibTorch lacks.
    std::cout << "peak bytes of training: not measured on cuda" << std::endl;
    return 0;
  }
  const double parameter_bytes = static_cast<double>(Setup(false).parameter_bytes());
  const size_t sgd_peak = training_peak_bytes(false);
  const size_t sam_peak = training_peak_bytes(true);
  std::cout << "peak bytes of training (torch_threads " << at::get_num_threads() << "): SGD " << sgd_peak << ", SAM "
            << sam_peak << "; SAM extra = "
            << (static_cast<double>(sam_peak) - static_cast<double>(sgd_peak)) / parameter_bytes
            << " parameter copies (parameters: " << parameter_bytes << " bytes)" << std::endl;
  return 0;
}
