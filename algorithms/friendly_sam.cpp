#include "basin/algorithms/friendly_sam.h"

#include <ATen/ATen.h>

namespace basin {

namespace {

SAMDefaults friendly_sam_defaults() {
  SAMDefaults defaults;
  defaults.sync_ascent = true;
  return defaults;
}

}  // namespace

FriendlySAM::FriendlySAM(Params& params) : SAM(params, friendly_sam_defaults()) {
  sigma_ = params.number("sigma", 1.0, 0);
  lambda_ = params.number("lambda", 0.9, 0, 1);
}

std::shared_ptr<SAMOptimizer> FriendlySAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                          const SAMOptions& options, const State& /*state*/) {
  return std::make_shared<FriendlySAMOptimizer>(std::move(base), options, sigma_, lambda_);
}

FriendlySAMOptimizer::FriendlySAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options,
                                           double sigma, double lambda)
    : SAMOptimizer(std::move(base), options), sigma_(sigma), lambda_(lambda) {}

std::vector<SAMOptimizer::Perturbation> FriendlySAMOptimizer::perturbation(std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> directions, params;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    for (std::size_t j = 0; j < groups[k].params.size(); ++j) {
      const at::Tensor& grad = groups[k].grads[j];
      at::Tensor& average = average_.of(groups[k].params[j]);
      at::Tensor direction = grad;
      if (!average.defined()) {
        average = grad.detach().clone();
      } else {
        direction = at::sub(grad, average, sigma_);
        average.mul_(lambda_).add_(grad, 1 - lambda_);
      }
      result[k].directions.push_back(direction);
      directions.push_back(direction);
      params.push_back(groups[k].params[j]);
    }
  }
  scale_to_rho(result, groups, directions, params);
  return result;
}

ParameterStates FriendlySAMOptimizer::variant_states(const ParameterNumbering& numbering) const {
  ParameterStates states = new_parameter_states();
  average_.save(states, numbering);
  return states;
}

void FriendlySAMOptimizer::load_variant_states(const ParameterStates& states, const ParameterNumbering& numbering) {
  average_.load(states, numbering);
}

BASIN_REGISTER(algorithm_registry(), "friendly_sam", FriendlySAM);

}  // namespace basin
