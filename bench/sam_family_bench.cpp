// What each SAM variant costs over SAM itself, on the CNN of the examples
// (Fashion-MNIST shapes, batch 128, SGD with momentum as the base):
//   - step time, variant / SAM, as the median of interleaved pairs (this
//     machine drifts by tens of percent between runs, never within a pair)
//   - peak memory of training over SAM's, in copies of the parameters
// Threads: BASIN_BENCH_THREADS (default 1); pairs: BASIN_BENCH_PAIRS (default 15).

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/fisher_sam.h"
#include "basin/algorithms/friendly_sam.h"
#include "basin/algorithms/gsam.h"
#include "basin/algorithms/sam_optimizer.h"
#include "basin/algorithms/vasso.h"
#include "basin/algorithms/wsam.h"
#include "basin/core/train/model.h"
#include "tracking_allocator.h"

namespace {

constexpr int64_t kBatch = 128;
using Clock = std::chrono::steady_clock;
using Base = std::shared_ptr<torch::optim::Optimizer>;
using Make = std::function<std::shared_ptr<basin::SAMOptimizer>(Base)>;

struct Variant {
  std::string name;
  Make make;
};

basin::SAMOptions options(int64_t parts = 1, bool adaptive = false) {
  basin::SAMOptions o;
  o.parts = parts;
  o.adaptive = adaptive;
  return o;
}

std::vector<Variant> variants() {
  return {
      {"sam", [](Base b) { return std::make_shared<basin::SAMOptimizer>(b, options()); }},
      {"asam", [](Base b) { return std::make_shared<basin::SAMOptimizer>(b, options(1, true)); }},
      {"gsam", [](Base b) { return std::make_shared<basin::GSAMOptimizer>(b, options(), 0.4); }},
      {"wsam", [](Base b) { return std::make_shared<basin::WSAMOptimizer>(b, options(), 0.9, true); }},
      {"friendly_sam", [](Base b) { return std::make_shared<basin::FriendlySAMOptimizer>(b, options(), 1.0, 0.9); }},
      {"fisher_sam", [](Base b) { return std::make_shared<basin::FisherSAMOptimizer>(b, options()); }},
      {"vasso", [](Base b) { return std::make_shared<basin::VaSSOOptimizer>(b, options(), 0.9); }},
      {"msam (m 4)", [](Base b) { return std::make_shared<basin::SAMOptimizer>(b, options(4)); }},
  };
}

struct Setup {
  std::shared_ptr<basin::Model> model;
  at::Tensor inputs, targets;
  std::shared_ptr<basin::SAMOptimizer> optimizer;

  explicit Setup(const Make& make) {
    at::manual_seed(0);
    basin::Params params(basin::Json::object(), "model");
    model = basin::model_registry().create("cnn", params, basin::DatasetInfo{{1, 28, 28}, 10});
    inputs = at::randn({kBatch, 1, 28, 28});
    targets = at::randint(0, 10, {kBatch}, at::kLong);
    optimizer = make(std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)));
  }
  // The closure every variant takes: mSAM's parts read part() of parts().
  void step() {
    optimizer->step([this] {
      optimizer->zero_grad();
      const int64_t parts = optimizer->parts();
      const at::Tensor x = parts == 1 ? inputs : inputs.chunk(parts)[optimizer->part()];
      const at::Tensor y = parts == 1 ? targets : targets.chunk(parts)[optimizer->part()];
      at::Tensor loss = at::cross_entropy_loss(model->forward(x), y);
      loss.backward();
      return loss.detach();
    });
  }
  double parameter_bytes() const {
    double bytes = 0;
    for (const auto& p : model->parameters()) bytes += static_cast<double>(p.numel() * p.element_size());
    return bytes;
  }
};

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Peak bytes held over three steps above what model and data held before.
double training_peak_bytes(const Make& make) {
  auto& tracker = basin::bench::TrackingAllocator::install();
  Setup s(make);
  tracker.reset_peak();
  const size_t before = tracker.current();
  for (int i = 0; i < 3; ++i) s.step();
  return static_cast<double>(tracker.peak() - before);
}

}  // namespace

int main() {
  const char* threads = std::getenv("BASIN_BENCH_THREADS");
  const char* pairs_env = std::getenv("BASIN_BENCH_PAIRS");
  at::set_num_threads(threads != nullptr ? std::atoi(threads) : 1);
  const int pairs = pairs_env != nullptr ? std::max(1, std::atoi(pairs_env)) : 15;
  const auto all = variants();
  const double sam_peak = training_peak_bytes(all.front().make);
  const double parameter_bytes = Setup(all.front().make).parameter_bytes();
  fmt::print("cnn, batch {}, SGD-momentum base, {} thread(s), {} interleaved pairs per variant\n", kBatch,
             at::get_num_threads(), pairs);
  fmt::print("{:<14} {:>12} {:>10} {:>26}\n", "variant", "step ms", "/ SAM", "peak over SAM (param copies)");
  for (const auto& variant : all) {
    Setup sam(all.front().make), other(variant.make);
    sam.step();  // warm-up: buffers and states are allocated by the first step
    other.step();
    std::vector<double> ratios, times;
    for (int i = 0; i < pairs; ++i) {
      const auto t0 = Clock::now();
      sam.step();
      const auto t1 = Clock::now();
      other.step();
      const auto t2 = Clock::now();
      times.push_back(seconds(t1, t2));
      ratios.push_back(seconds(t1, t2) / seconds(t0, t1));
    }
    const double extra = (training_peak_bytes(variant.make) - sam_peak) / parameter_bytes;
    fmt::print("{:<14} {:>12.1f} {:>10.3f} {:>26.2f}\n", variant.name, median(times) * 1e3, median(ratios), extra);
  }
  return 0;
}
