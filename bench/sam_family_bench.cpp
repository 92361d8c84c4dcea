// What each SAM-family algorithm costs over the plain optimizer it wraps,
// on basin's small CNN, models/cnn.cpp (Fashion-MNIST shapes, batch 128, SGD with
// momentum). The optimizer-side ones step a SAMOptimizer with a closure; the
// loss-side ones (saf, mesa) run through the engine as a hand-written loop
// does, with their term in the loss (an epoch past their start) and SAF's
// bank sized for Fashion-MNIST's 60000 samples:
//   - step time over SGD's from interleaved pairs (this machine drifts by
//     tens of percent between runs, never within a pair): the ratio of the
//     pairs' total times, which weighs LookSAM's refresh steps and AE-SAM's
//     SAM steps at their share, and the median of the per-pair ratios
//   - the share of steps that took SAM's second pass (momentum_sam: ran at a
//     perturbed point; "-" for the loss-side ones, which have no SAM steps)
//   - peak memory of training over SGD's, in copies of the parameters
// Threads: BASIN_BENCH_THREADS (default 1); pairs: BASIN_BENCH_PAIRS (default 20);
// BASIN_BENCH_ONLY: only the algorithms whose name contains it.

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

#include "basin/algorithms/sam/sam_family.h"
#include "basin/core/base/blas.h"
#include "basin/core/engine/engine.h"
#include "basin/core/model/model.h"
#include "tracking_allocator.h"

namespace {

constexpr int64_t kBatch = 128;
using Clock = std::chrono::steady_clock;
using Base = std::shared_ptr<torch::optim::Optimizer>;
constexpr int64_t kRunSteps = 40;  // the run's length AE-SAM's threshold schedule sees

struct Variant {
  std::string name;
  std::string sam;         // an optimizer-side algorithm's registered name, run by make_sam_optimizer
  basin::Json keys;        // with these keys
  std::string algorithms;  // or a loss-side one's "algorithms" config
};

/// Every optimizer-side algorithm the family registers, with its defaults
/// (msam at m 4, looksam at k 5), then settings worth their own row, then
/// the loss-side ones.
std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (const auto& name : basin::sam_family_registry().names()) {
    if (name == "flat_lora" || name == "bi_lora") continue;  // they train low-rank adapters, which this CNN has none of
    out.push_back({name, name, basin::Json::object(), ""});
  }
  out.push_back({"esam, beta 1", "esam", {{"beta", 1.0}}, ""});
  out.push_back({"esam, gamma 1", "esam", {{"gamma", 1.0}}, ""});
  out.push_back({"sam, start 10", "sam", {{"start", 10}}, ""});
  out.push_back({"saf", "", basin::Json::object(), R"({"saf": {}})"});
  out.push_back({"mesa", "", basin::Json::object(), R"({"mesa": {}})"});
  return out;
}

constexpr int64_t kTrainSize = 60000;

struct Setup {
  std::shared_ptr<basin::Model> model;
  at::Tensor inputs, targets;
  std::shared_ptr<torch::optim::Optimizer> base;
  std::shared_ptr<basin::SAMOptimizer> optimizer;  // an optimizer-side algorithm's
  std::unique_ptr<basin::State> state;             // a loss-side one's, with its engine
  std::unique_ptr<basin::Engine> engine;
  bool started = false;

  explicit Setup(const Variant* variant) {
    at::manual_seed(0);
    basin::Params params(basin::Json::object(), "model");
    model = basin::model_registry().create("cnn", params, basin::DatasetInfo{{1, 28, 28}, 10});
    inputs = at::randn({kBatch, 1, 28, 28});
    targets = at::randint(0, 10, {kBatch}, at::kLong);
    base = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    if (variant == nullptr) return;
    if (!variant->sam.empty()) {
      basin::State run;  // the model names the parameters (ASAM's "scale"), the length schedules AE-SAM
      run.model = model;
      run.max_steps = kRunSteps;
      optimizer = basin::make_sam_optimizer(variant->sam, base, variant->keys, run);
      return;
    }
    state = std::make_unique<basin::State>();
    state->model = model;
    state->forward = [m = model.get()](const at::Tensor& x) { return m->forward(x); };
    state->optimizer = base;
    state->train_size = kTrainSize;
    state->timestamp.epoch = 10;  // past every default start_epoch: the term is in the loss
    engine = std::make_unique<basin::Engine>(*state);
    basin::Params algorithms(basin::Json::parse(variant->algorithms), "algorithms");
    engine->add_algorithms(algorithms);
  }
  // SAM steps over steps since `mark()` (after the warm-up step).
  void mark() {
    if (optimizer) marked = {optimizer->steps(), optimizer->sam_steps()};
  }
  std::string sam_share() const {
    if (!optimizer) return "-";
    return fmt::format("{:.2f}", static_cast<double>(optimizer->sam_steps() - marked.second) /
                                     static_cast<double>(optimizer->steps() - marked.first));
  }
  std::pair<int64_t, int64_t> marked{0, 0};
  void step() {
    if (state) return loss_side_step();
    if (!optimizer) {  // plain SGD
      base->zero_grad();
      at::cross_entropy_loss(model->forward(inputs), targets).backward();
      base->step();
      return;
    }
    // The closure every variant takes: it runs on what request() asks
    // (mSAM's part, ESAM's samples and its forward alone).
    optimizer->step([this] {
      const basin::PassRequest& request = optimizer->request();
      if (request.backward) optimizer->zero_grad();
      const basin::Batch batch = basin::requested_samples({inputs, targets, {}}, request);
      const at::Tensor &x = batch.inputs, &y = batch.targets;
      at::AutoGradMode grad_mode(request.backward);
      if (!request.per_sample_losses) {
        at::Tensor loss = at::cross_entropy_loss(model->forward(x), y);
        if (request.backward) loss.backward();
        return loss.detach();
      }
      const at::Tensor each = at::cross_entropy_loss(model->forward(x), y, {}, at::Reduction::None);
      if (request.backward) each.mean().backward();
      return each.detach();
    });
  }
  // A hand-written loop's step, with the events the loss-side algorithms use.
  void loss_side_step() {
    if (!started) engine->run(basin::Event::FIT_START);  // here, so that peak memory counts MESA's average
    started = true;
    state->microbatch = {inputs, targets, at::randperm(kTrainSize, at::kLong).narrow(0, 0, kBatch)};
    base->zero_grad();
    engine->run(basin::Event::BEFORE_FORWARD);
    state->outputs = model->forward(inputs);
    state->loss = at::cross_entropy_loss(state->outputs, targets);
    engine->run(basin::Event::AFTER_LOSS);
    state->loss.backward();
    base->step();
    engine->run(basin::Event::AFTER_STEP);
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
double training_peak_bytes(const Variant* variant) {
  auto& tracker = basin::bench::TrackingAllocator::install();
  Setup s(variant);
  tracker.reset_peak();
  const size_t before = tracker.current();
  for (int i = 0; i < 3; ++i) s.step();
  return static_cast<double>(tracker.peak() - before);
}

// What a forward alone (no gradient, evaluation mode: MESA's extra forward,
// ESAM's) costs against an SGD step, from interleaved pairs: the floor of
// the algorithms that add one.
double forward_over_sgd(int pairs) {
  Setup sgd(nullptr), probe(nullptr);
  sgd.step();
  double sgd_total = 0, forward_total = 0;
  for (int i = 0; i < pairs; ++i) {
    const auto t0 = Clock::now();
    sgd.step();
    const auto t1 = Clock::now();
    {
      at::NoGradGuard no_grad;
      probe.model->eval();
      probe.model->forward(probe.inputs);
      probe.model->train();
    }
    const auto t2 = Clock::now();
    sgd_total += seconds(t0, t1);
    forward_total += seconds(t1, t2);
  }
  return forward_total / sgd_total;
}

}  // namespace

int main() {
  const char* threads = std::getenv("BASIN_BENCH_THREADS");
  const char* pairs_env = std::getenv("BASIN_BENCH_PAIRS");
  basin::set_compute_threads(threads != nullptr ? std::atoi(threads) : 1);
  const int pairs = pairs_env != nullptr ? std::max(1, std::atoi(pairs_env)) : 20;
  const double sgd_peak = training_peak_bytes(nullptr);
  const double parameter_bytes = Setup(nullptr).parameter_bytes();
  fmt::print("cnn, batch {}, SGD-momentum base, {} thread(s), {} interleaved pairs with SGD per algorithm\n", kBatch,
             at::get_num_threads(), pairs);
  fmt::print("a forward alone (no gradient, evaluation mode) / SGD step: {:.3f}\n", forward_over_sgd(pairs));
  fmt::print("{:<16} {:>13} {:>11} {:>13} {:>10} {:>30}\n", "algorithm", "mean step ms", "total / SGD",
             "median / SGD", "SAM steps", "peak over SGD (param copies)");
  const char* only = std::getenv("BASIN_BENCH_ONLY");
  for (const auto& variant : variants()) {
    if (only != nullptr && variant.name.find(only) == std::string::npos) continue;
    Setup sgd(nullptr), other(&variant);
    sgd.step();  // warm-up: buffers and states are allocated by the first step
    other.step();
    other.mark();
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
    const double extra = (training_peak_bytes(&variant) - sgd_peak) / parameter_bytes;
    fmt::print("{:<16} {:>13.1f} {:>11.3f} {:>13.3f} {:>10} {:>30.2f}\n", variant.name, other_total / pairs * 1e3,
               other_total / sgd_total, median(ratios), other.sam_share(), extra);
  }
  return 0;
}
