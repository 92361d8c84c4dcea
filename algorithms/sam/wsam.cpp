#include "basin/algorithms/wsam.h"

#include <ATen/ATen.h>

#include "basin/core/parallel/sharded_optimizer.h"

namespace basin {

namespace {

SAMDefaults wsam_defaults() {
  SAMDefaults defaults;
  defaults.sync_ascent = true;
  return defaults;
}

}  // namespace

WSAM::WSAM(Params& params) : SAM(params, wsam_defaults()) {
  gamma_ = params.number("gamma", 0.9, 0);
  if (!(gamma_ < 1)) params.fail("gamma", "a number in [0, 1)", gamma_);
  decouple_ = params.boolean("decouple", true);
}

std::shared_ptr<SAMOptimizer> WSAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                   const SAMOptions& options, const State& /*state*/) {
  return std::make_shared<WSAMOptimizer>(std::move(base), options, gamma_, decouple_);
}

WSAMOptimizer::WSAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double gamma,
                             bool decouple)
    : SAMOptimizer(std::move(base), options), weight_(gamma / (1 - gamma)), decouple_(decouple) {}

std::vector<SAMOptimizer::Perturbation> WSAMOptimizer::perturbation(std::vector<GroupView>& groups) {
  clean_.take(parameters_of(groups_with_grads()));  // every parameter's, perturbed or not
  return SAMOptimizer::perturbation(groups);
}

void WSAMOptimizer::adjust_descent_gradients(std::vector<GroupView>& groups) {
  at::NoGradGuard no_grad;
  pending_.clear();
  for (auto& g : groups) {
    for (std::size_t j = 0; j < g.params.size(); ++j) {
      const at::Tensor* clean = clean_.of(g.params[j]);
      if (clean == nullptr || !owns(g.params[j])) continue;
      at::Tensor& grad = g.grads[j];
      if (decouple_) {
        pending_.push_back({g.params[j], grad - *clean, g.get("lr") * weight_});
        grad.copy_(*clean);
      } else {
        grad.mul_(weight_).add_(*clean, 1 - weight_);  // g + a (g_p - g)
      }
    }
  }
}

void WSAMOptimizer::after_base_step() {
  if (!decouple_) return;
  at::NoGradGuard no_grad;
  for (auto& step : pending_) step.param.add_(step.sharpness, -step.scale);
  pending_.clear();
  if (shards() != nullptr) shards()->broadcast_parameters();  // each owner moved its shard
}

BASIN_REGISTER(algorithm_registry(), "wsam", WSAM);

}  // namespace basin
