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
    : MovingAverageSAMOptimizer(std::move(base), options), theta_(theta) {}

at::Tensor VaSSOOptimizer::direction(const at::Tensor& grad, at::Tensor& average) {
  if (!average.defined()) {
    average = grad.detach().clone();
  } else {
    average.mul_(1 - theta_).add_(grad, theta_);  // updated before use
  }
  return average;
}

BASIN_REGISTER(algorithm_registry(), "vasso", VaSSO);

}  // namespace basin
