#include "basin/algorithms/vasso.h"

#include <ATen/ATen.h>

namespace basin {

namespace {

SAMDefaults vasso_defaults() {
  SAMDefaults defaults;
  defaults.epsilon = 1e-7;
  defaults.sync_ascent = true;
  return defaults;
}

}  // namespace

VaSSO::VaSSO(Params& params) : SAM(params, vasso_defaults()) {
  theta_ = params.number("theta", 0.9, 0, 1);
  if (!(theta_ > 0)) params.fail("theta", "a number in (0, 1]", theta_);
}

std::shared_ptr<SAMOptimizer> VaSSO::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                    const SAMOptions& options, const State& /*state*/) {
  return std::make_shared<VaSSOOptimizer>(std::move(base), options, theta_);
}

VaSSOOptimizer::VaSSOOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double theta)
    : SAMOptimizer(std::move(base), options), theta_(theta) {}

std::vector<SAMOptimizer::Perturbation> VaSSOOptimizer::perturbation(std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> directions, params;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    for (std::size_t j = 0; j < groups[k].params.size(); ++j) {
      const at::Tensor& grad = groups[k].grads[j];
      at::Tensor& average = average_.of(groups[k].params[j]);
      if (!average.defined()) {
        average = grad.detach().clone();
      } else {
        average.mul_(1 - theta_).add_(grad, theta_);
      }
      result[k].directions.push_back(average);
      directions.push_back(average);
      params.push_back(groups[k].params[j]);
    }
  }
  scale_to_rho(result, groups, directions, params);
  return result;
}

ParameterStates VaSSOOptimizer::variant_states(const ParameterNumbering& numbering) const {
  ParameterStates states = new_parameter_states();
  average_.save(states, numbering);
  return states;
}

void VaSSOOptimizer::load_variant_states(const ParameterStates& states, const ParameterNumbering& numbering) {
  average_.load(states, numbering);
}

BASIN_REGISTER(algorithm_registry(), "vasso", VaSSO);

}  // namespace basin
