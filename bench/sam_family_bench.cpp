// What each SAM-family algorithm costs over the plain optimizer it wraps,
// on the CNN of the examples (Fashion-MNIST shapes, batch 128, SGD with
// momentum):
//   - step time over SGD's from interleaved pairs (this machine drifts by
//     tens of percent between runs, never within a pair): the ratio of the
//     pairs' total times, which weighs LookSAM's refresh steps and AE-SAM's
//     SAM steps at their share, and the median of the per-pair ratios
//   - the share of steps that took SAM's second pass
//   - peak memory of training over SGD's, in copies of the parameters
// Threads: BASIN_BENCH_THREADS (default 1); pairs: BASIN_BENCH_PAIRS (default 20).

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

#include "basin/algorithms/ae_sam.h"
#include "basin/algorithms/fisher_sam.h"
#include "basin/algorithms/friendly_sam.h"
#include "basin/algorithms/gsam.h"
#include "basin/algorithms/looksam.h"
#include "basin/algorithms/momentum_sam.h"
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

basin::SAMOptions options(int64_t parts = 1, bool adaptive = false, int64_t start = 0) {
  basin::SAMOptions o;
  o.parts = parts;
  o.adaptive = adaptive;
  o.start = start;
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
      {"looksam (k 5)", [](Base b) { return std::make_shared<basin::LookSAMOptimizer>(b, options(), 5, 0.7); }},
      {"ae_sam", [](Base b) { return std::make_shared<basin::AESAMOptimizer>(b, options(), 0.9, -1, 1, 40); }},
      {"momentum_sam", [](Base b) { return std::make_shared<basin::MomentumSAMOptimizer>(b, options()); }},
      {"sam, start 10", [](Base b) { return std::make_shared<basin::SAMOptimizer>(b, options(1, false, 10)); }},
  };
}

struct Setup {
  std::shared_ptr<basin::Model> model;
  at::Tensor inputs, targets;
  std::shared_ptr<torch::optim::Optimizer> base;
  std::shared_ptr<basin::SAMOptimizer> optimizer;  // none: plain SGD

  explicit Setup(const Make& make) {
    at::manual_seed(0);
    basin::Params params(basin::Json::object(), "model");
    model = basin::model_registry().create("cnn", params, basin::DatasetInfo{{1, 28, 28}, 10});
    inputs = at::randn({kBatch, 1, 28, 28});
    targets = at::randint(0, 10, {kBatch}, at::kLong);
    base = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    if (make) optimizer = make(base);
  }
  // The closure every variant takes: mSAM's parts read part() of parts().
  void step() {
    if (!optimizer) {  // plain SGD
      base->zero_grad();
      at::cross_entropy_loss(model->forward(inputs), targets).backward();
      base->step();
      return;
    }
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
  const int pairs = pairs_env != nullptr ? std::max(1, std::atoi(pairs_env)) : 20;
  const double sgd_peak = training_peak_bytes(nullptr);
  const double parameter_bytes = Setup(nullptr).parameter_bytes();
  fmt::print("cnn, batch {}, SGD-momentum base, {} thread(s), {} interleaved pairs with SGD per algorithm\n", kBatch,
             at::get_num_threads(), pairs);
  fmt::print("{:<16} {:>13} {:>11} {:>13} {:>10} {:>30}\n", "algorithm", "mean step ms", "total / SGD",
             "median / SGD", "SAM steps", "peak over SGD (param copies)");
  for (const auto& variant : variants()) {
    Setup sgd(nullptr), other(variant.make);
    sgd.step();  // warm-up: buffers and states are allocated by the first step
    other.step();
    const int64_t steps_before = other.optimizer->steps(), sam_before = other.optimizer->sam_steps();
    std::vector<double> ratios;
    double sgd_total = 0, other_total = 0;
    for (int i = 0; i < pairs; ++i) {
      const auto t0 = Clock::now();
      sgd.step();
      const auto t1 = Clock::now();
      other.step();
      const auto t2 = Clock::now();
      sgd_total += seconds(t0, t1);
      other_total += seconds(t1, t2);
      ratios.push_back(seconds(t1, t2) / seconds(t0, t1));
    }
    const double share = static_cast<double>(other.optimizer->sam_steps() - sam_before) /
                         static_cast<double>(other.optimizer->steps() - steps_before);
    const double extra = (training_peak_bytes(variant.make) - sgd_peak) / parameter_bytes;
    fmt::print("{:<16} {:>13.1f} {:>11.3f} {:>13.3f} {:>10.2f} {:>30.2f}\n", variant.name, other_total / pairs * 1e3,
               other_total / sgd_total, median(ratios), share, extra);
  }
  return 0;
}
