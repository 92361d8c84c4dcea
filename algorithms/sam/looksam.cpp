#include "basin/algorithms/looksam.h"

#include <cmath>

#include <ATen/ATen.h>

#include "basin/core/parallel/grad_norm.h"
#include "basin/core/parallel/sharded_optimizer.h"

namespace basin {

namespace {

SAMDefaults looksam_defaults() {
  SAMDefaults defaults;
  defaults.sync_ascent = true;
  return defaults;
}

}  // namespace

LookSAM::LookSAM(Params& params) : SAM(params, looksam_defaults()) {
  k_ = params.integer("k", 5, 1);
  alpha_ = params.number("alpha", 0.7, 0);
}

std::shared_ptr<SAMOptimizer> LookSAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                      const SAMOptions& options, const State& /*state*/) {
  if (dynamic_cast<ShardedParameters*>(base.get()) != nullptr) {
    // Under ZeRO-1 a rank's descent gradients are averaged for its own shard
    // only, so g_v would be right on each owner alone, and a checkpoint
    // (rank 0's) would hold wrong values for the other shards.
    throw ConfigError("config key 'parallel.mode': looksam does not run under \"zero1\" yet (its stored g_v "
                      "would be sharded); use \"ddp\"");
  }
  return std::make_shared<LookSAMOptimizer>(std::move(base), options, k_, alpha_);
}

LookSAMOptimizer::LookSAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, int64_t k,
                                   double alpha)
    : SAMOptimizer(std::move(base), options), k_(k), alpha_(alpha) {}

bool LookSAMOptimizer::descend(std::vector<GroupView>& groups) {
  // A refresh whose descent overflowed (the step was skipped) is retried at the next step.
  const bool refresh = looks_ % k_ == 0 || orthogonal_norm_ < 0 || refresh_pending_;
  ++looks_;
  if (refresh) {
    refresh_pending_ = true;
    clean_.take(parameters_of(groups));
    return true;
  }
  // Reuse: g + alpha * ||g|| / ||g_v|| * g_v. The synced g is the same on every rank.
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& g : groups) grads.insert(grads.end(), g.grads.begin(), g.grads.end());
  const double norm = global_norm(grads).item<double>();
  if (!(orthogonal_norm_ > 1e-12)) return false;  // g_s was parallel to g: nothing to add
  const double scale = alpha_ * norm / orthogonal_norm_;
  for (auto& g : groups) {
    for (std::size_t j = 0; j < g.params.size(); ++j) {
      const at::Tensor& orthogonal = orthogonal_.of(g.params[j]);
      if (orthogonal.defined()) g.grads[j].add_(orthogonal, scale);
    }
  }
  return false;
}

void LookSAMOptimizer::adjust_descent_gradients(std::vector<GroupView>& groups) {
  // g_v = g_s - (<g_s, g> / ||g||^2) g, over the whole model (never sharded: see make_optimizer).
  at::NoGradGuard no_grad;
  at::Device device = at::kCPU;  // the gradients', so that the sums can cross ranks (NCCL too)
  for (const auto& g : groups) {
    if (!g.grads.empty()) device = g.grads.front().device();
  }
  at::Tensor sums = at::zeros({2}, at::TensorOptions(at::kDouble).device(device));
  for (const auto& g : groups) {
    for (std::size_t j = 0; j < g.params.size(); ++j) {
      const at::Tensor* clean = clean_.of(g.params[j]);
      if (clean == nullptr) continue;
      sums += at::stack({(g.grads[j].to(at::kDouble) * clean->to(at::kDouble)).sum(), clean->to(at::kDouble).pow(2).sum()});
    }
  }
  sums = sums.cpu();
  const double dot = sums[0].item<double>(), clean_squares = sums[1].item<double>();
  const double along = clean_squares > 0 ? dot / clean_squares : 0;
  at::Tensor orthogonal_squares = at::zeros({1}, at::TensorOptions(at::kDouble).device(device));
  for (const auto& g : groups) {
    for (std::size_t j = 0; j < g.params.size(); ++j) {
      const at::Tensor* clean = clean_.of(g.params[j]);
      at::Tensor& orthogonal = orthogonal_.of(g.params[j]);
      orthogonal = clean == nullptr ? at::Tensor() : g.grads[j] - *clean * along;
      if (orthogonal.defined()) orthogonal_squares += orthogonal.to(at::kDouble).pow(2).sum();
    }
  }
  orthogonal_norm_ = std::sqrt(orthogonal_squares.item<double>());
  refresh_pending_ = false;
}

ParameterStates LookSAMOptimizer::variant_states(const ParameterNumbering& numbering) const {
  ParameterStates states = new_parameter_states();
  orthogonal_.save(states, numbering);
  return states;
}

void LookSAMOptimizer::load_variant_states(const ParameterStates& states, const ParameterNumbering& numbering) {
  orthogonal_.load(states, numbering);
}

StateDict LookSAMOptimizer::variant_values() const {
  StateDict values = new_state_dict();
  values.insert("looks", looks_);
  values.insert("orthogonal_norm", orthogonal_norm_);
  return values;
}

void LookSAMOptimizer::load_variant_values(const StateDict& values) {
  if (!values.contains("looks") || !values.at("looks").isInt() || !values.contains("orthogonal_norm") ||
      !values.at("orthogonal_norm").isDouble()) {
    throw std::invalid_argument("LookSAM state has no integer 'looks' and number 'orthogonal_norm'");
  }
  looks_ = values.at("looks").toInt();
  orthogonal_norm_ = values.at("orthogonal_norm").toDouble();
}

BASIN_REGISTER(algorithm_registry(), "looksam", LookSAM);

}  // namespace basin
