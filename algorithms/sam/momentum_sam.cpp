#include "basin/algorithms/momentum_sam.h"

#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/core/optimizer_state.h"
#include "basin/core/parallel/sharded_optimizer.h"

namespace basin {

namespace {

SAMDefaults momentum_sam_defaults() {
  SAMDefaults defaults;
  defaults.rho = 0.3;
  return defaults;
}

}  // namespace

MomentumSAM::MomentumSAM(Params& params) : SAM(params, momentum_sam_defaults()) {
  if (options_.adaptive) params.fail("adaptive", "false (momentum_sam perturbs along the momentum)", Json(true));
}

std::shared_ptr<SAMOptimizer> MomentumSAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                          const SAMOptions& options, const State& /*state*/) {
  if (dynamic_cast<ShardedParameters*>(base.get()) != nullptr) {
    throw ConfigError("config key 'parallel.mode': momentum_sam does not run under \"zero1\" yet (each rank keeps "
                      "its own shard's momentum, and every rank's pass needs the whole perturbation); use \"ddp\"");
  }
  const std::string why_not = why_no_first_moment(*base);
  if (!why_not.empty()) {
    throw ConfigError("config key 'optimizer': momentum_sam perturbs along the optimizer's momentum, but " +
                      why_not + "; use SGD with momentum > 0, Adam or AdamW");
  }
  return std::make_shared<MomentumSAMOptimizer>(std::move(base), options);
}

MomentumSAMOptimizer::MomentumSAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options)
    : SAMOptimizer(std::move(base), options) {
  const std::string why_not = why_no_first_moment(this->base());
  if (!why_not.empty()) throw std::invalid_argument("Momentum-SAM needs an optimizer with momentum: " + why_not);
  if (options.adaptive) throw std::invalid_argument("Momentum-SAM does not take adaptive");
}

std::vector<SAMOptimizer::Perturbation> MomentumSAMOptimizer::perturbation_before_pass(std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> normed, normed_params;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    for (const auto& p : groups[k].params) {
      at::Tensor v = first_moment(base(), p);
      // A parameter not stepped yet has no momentum: it stays at w.
      if (!v.defined()) v = at::zeros_like(p);
      normed.push_back(v);
      normed_params.push_back(p);
      result[k].directions.push_back(std::move(v));  // the live buffer: read before the base steps
    }
  }
  // rho_k / (||v|| + epsilon) per group, then downhill along v: -rho_k * v / ||v||.
  // No momentum anywhere (the first step) leaves every scale 0: w.
  scale_to_rho(result, groups, normed, normed_params);
  for (auto& p : result) p.scale = -p.scale;
  return result;
}

BASIN_REGISTER(algorithm_registry(), "momentum_sam", MomentumSAM);

}  // namespace basin
