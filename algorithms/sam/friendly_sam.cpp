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
    : MovingAverageSAMOptimizer(std::move(base), options), sigma_(sigma), lambda_(lambda) {}

at::Tensor FriendlySAMOptimizer::direction(const at::Tensor& grad, at::Tensor& average) {
  if (!average.defined()) {  // the first SAM step is SAM's
    average = grad.detach().clone();
    return grad;
  }
  at::Tensor direction = at::sub(grad, average, sigma_);  // the average of the steps before
  average.mul_(lambda_).add_(grad, 1 - lambda_);          // of raw gradients
  return direction;
}

BASIN_REGISTER(algorithm_registry(), "friendly_sam", FriendlySAM);

}  // namespace basin
