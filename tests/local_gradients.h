#pragma once

// A reduce's rounding and nothing else: one plain-SGD step from the same
// weights, two ways of summing the ranks' gradients, each rank's own
// gradients read by a hook before any sync. Each weight then differs by at
// most what the sums' rounding allows (precision_bounds.h) of those
// gradients' magnitudes: a bound per weight, derived, and tight enough that
// a wrong sum (a rank missing, a group's sum for the job's) breaks it.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "basin/core/engine/algorithm.h"
#include "distributed_util.h"
#include "precision_bounds.h"

namespace basin::test {

/// Every backward's gradient of each of the model's parameters on this
/// rank, as autograd hands it to the parameter: before the mode's own hooks
/// sync or reduce-scatter it.
class LocalGradients : public Algorithm {
 public:
  std::string name() const override { return "local_gradients"; }
  bool match(Event event, const State&) const override {
    return event == Event::BEFORE_BACKWARD || event == Event::AFTER_BACKWARD;
  }
  void apply(Event event, State& state, Logger&) override {
    if (event == Event::AFTER_BACKWARD) {
      for (std::size_t i = 0; i < hooked_.size(); ++i) hooked_[i].remove_hook(keys_[i]);
      hooked_.clear();
      keys_.clear();
      return;
    }
    const auto params = state.model->parameters();
    passes.emplace_back(params.size());
    const std::size_t pass = passes.size() - 1;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!params[i].requires_grad()) continue;
      hooked_.push_back(params[i]);
      keys_.push_back(params[i].register_hook([this, pass, i](const at::Tensor& g) { passes[pass][i] = g.detach().clone(); }));
    }
  }

  std::vector<Weights> passes;  // [backward][parameter]

 private:
  std::vector<at::Tensor> hooked_;
  std::vector<unsigned> keys_;
};

/// What a rank ends one run with: its weights whole, its local gradients.
struct StepHeld {
  Weights whole;
  std::vector<Weights> passes;
};

inline std::vector<StepHeld> train_recording_local_gradients(int world, const Json& config) {
  std::vector<StepHeld> held(static_cast<std::size_t>(world));
  run_ranks(world, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    auto recorder = std::make_shared<LocalGradients>();
    trainer.engine().add_algorithm(recorder);
    trainer.fit();
    held[static_cast<std::size_t>(rank)] = {weights_of(trainer), recorder->passes};
  });
  return held;
}

/// A way of reducing: the config's edit that asks for it, and the factor
/// of the gradients' magnitudes its sums may err by (sum_error_factor of
/// each stage, over every rank's and microbatch's gradient).
struct ReduceWay {
  std::string what;
  std::function<void(Json&)> edit;
  double error_factor;
};

/// Trains `config` for one plain-SGD step at `lr` (no SAM: its ascent
/// would move each way's perturbed weights, and their rounding to bf16,
/// apart), with its microbatches, clipping and grad scaler, on `world`
/// ranks, reduced `a`'s way and `b`'s, and expects: the same local
/// gradients in both, bit for bit (the same weights, data and kernels: only
/// the reduce differs); rank 0's weights apart by at most the bound below
/// at each weight; apart at all, where the ways round differently; and the
/// bound below the step (a run that did not train would break it). Returns
/// the largest share of its bound a weight used.
///
/// Each way's mean gradient g (A = the local gradients' magnitudes summed,
/// N ranks, P microbatches, `scale` the grad scaler's first, a power of 2)
/// errs by at most E = (error_factor + (P + 1) u32) A / (N scale): the sums,
/// then P divisions by N and the scale's. Clipping to k multiplies g by
/// c = k / (|g| + 1e-6) where |g| > k: |g| in fp32 over n values errs by
/// gamma_{2n+8}(u32) (squares, sums, the norms' norm, sqrt) and the two ways'
/// norms by |E_a + E_b| more, so the c differ by at most
///   c (3 gamma_{2n+8} + (|E_a + E_b| + 1e-6) / |g|_low + 2 u32)
/// (1e-6: the jump where one clips and the other does not). With 3 more
/// roundings of 2^-24 on each product (c g, lr g, w - lr g), each weight is
/// apart by at most
///   lr c [E_a + E_b + 2 (dc + 3 u32) A / (N scale)] + u32 (|w_a| + |w_b|)
///   + lr c 2 sum_underflow / (N scale).
inline double expect_one_step_apart_by_the_reduce_alone(Json config, double lr, int world, const ReduceWay& a,
                                                        const ReduceWay& b, FloatFormat format, double scale = 1,
                                                        bool rounds_differently = true) {
  config["max_steps"] = 1;
  config["algorithms"] = Json::object();
  config["optimizer"] = {{"name", "sgd"}, {"lr", lr}};
  Json plain = config;
  plain.erase("parallel");
  const Weights start = Trainer(plain).whole_parameters();
  a.edit(config);
  const auto run_a = train_recording_local_gradients(world, config);
  b.edit(config);
  const auto run_b = train_recording_local_gradients(world, config);
  const std::string what = a.what + " against " + b.what;
  const int64_t passes = config["data"].value("microbatches", 1);
  const double n = static_cast<double>(world) * scale;
  std::vector<at::Tensor> magnitudes, mean;  // A, and the exact mean in double, each weight's
  for (int r = 0; r < world; ++r) {
    const auto& mine = run_a[static_cast<std::size_t>(r)].passes;
    const auto& theirs = run_b[static_cast<std::size_t>(r)].passes;
    EXPECT_EQ(mine.size(), static_cast<std::size_t>(passes)) << what << ": a backward a microbatch, rank " << r;
    if (mine.size() != static_cast<std::size_t>(passes) || theirs.size() != mine.size()) return 0;
    for (std::size_t p = 0; p < mine.size(); ++p) {
      for (std::size_t i = 0; i < mine[p].size(); ++i) {
        EXPECT_TRUE(mine[p][i].defined() && at::equal(mine[p][i], theirs[p][i])) << what << ": rank " << r << "'s parameter " << i;
        if (!mine[p][i].defined()) return 0;
        const at::Tensor g = mine[p][i].to(at::kDouble);
        if (magnitudes.size() <= i) {
          magnitudes.push_back(g.abs());
          mean.push_back(g / n);
        } else {
          magnitudes[i] += g.abs();
          mean[i] += g / n;
        }
      }
    }
  }
  const double carried = static_cast<double>(passes + 1) * kFp32.u;
  double e_norm = 0, g_norm = 0, numel = 0;
  for (std::size_t i = 0; i < magnitudes.size(); ++i) {
    e_norm += ((a.error_factor + b.error_factor + 2 * carried) * magnitudes[i] / n).square().sum().item<double>();
    g_norm += mean[i].square().sum().item<double>();
    numel += static_cast<double>(mean[i].numel());
  }
  e_norm = std::sqrt(e_norm);
  g_norm = std::sqrt(g_norm);
  // c: the larger coefficient; dc: how far apart the two may be, relative to c.
  const double clip = config.value("grad_clip_norm", 0.0), low = g_norm - e_norm;
  double c = 1, dc = 0;
  if (clip > 0) {
    c = low > clip ? clip / low : 1;
    dc = low > 0 ? 3 * rounding_gamma(static_cast<int64_t>(2 * numel + 8), kFp32.u) + (e_norm + 1e-6) / low + 2 * kFp32.u
                 : 1;  // no norm to speak of: each coefficient is in (0, 1]
  }
  const Weights& wa = run_a[0].whole;
  const Weights& wb = run_b[0].whole;
  EXPECT_EQ(wa.size(), magnitudes.size()) << what;
  double apart = 0, moved = 0, largest_bound = 0, used = 0;
  for (std::size_t i = 0; i < std::min(wa.size(), magnitudes.size()); ++i) {
    const at::Tensor x = wa[i].to(at::kDouble), y = wb[i].to(at::kDouble);
    const at::Tensor a_over_n = magnitudes[i].view(x.sizes()) / n;  // A / (N scale)
    const at::Tensor bound = lr * c * (a.error_factor + b.error_factor + 2 * carried + 2 * (dc + 3 * kFp32.u)) * a_over_n +
                             kFp32.u * (x.abs() + y.abs()) + lr * c * 2 * sum_underflow(world * passes, format) / n;
    const at::Tensor gap = (x - y).abs();
    EXPECT_TRUE((gap <= bound).all().item<bool>())
        << what << ", parameter " << i << ": " << (gap - bound).max().item<double>() << " over the bound";
    apart = std::max(apart, gap.max().item<double>());
    used = std::max(used, (gap / bound).max().item<double>());
    largest_bound = std::max(largest_bound, bound.max().item<double>());
    moved = std::max(moved, (x - start[i].to(at::kDouble)).abs().max().item<double>());
  }
  if (rounds_differently) {
    EXPECT_GT(apart, 0.0) << what << ": the comparison is not of a run with itself";
  }
  EXPECT_LT(largest_bound, moved) << what << ": a run that did not train would be within the bound";
  return used;
}

/// One step of `config` (SGD at `lr`) under ddp and under `mode`: each
/// sums its ranks' and microbatches' gradients in fp32 in its own order
/// (gamma of their count), so they may also round alike.
inline double expect_one_step_follows_ddp(const Json& config, const std::string& mode, int world, double scale = 1,
                                          double lr = 0.1) {
  const double terms = sum_error_factor(world * config["data"].value("microbatches", int64_t{1}), kFp32);
  auto in = [](const std::string& name) { return [name](Json& c) { c["parallel"]["mode"] = name; }; };
  return expect_one_step_apart_by_the_reduce_alone(config, lr, world, {"ddp", in("ddp"), terms}, {mode, in(mode), terms},
                                                   kFp32, scale, false);
}

}  // namespace basin::test
