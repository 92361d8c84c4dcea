#include "basin/algorithms/ae_sam.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "basin/core/parallel/grad_norm.h"

namespace basin {

namespace {

SAMDefaults ae_sam_defaults() {
  SAMDefaults defaults;
  defaults.sync_ascent = true;
  return defaults;
}

}  // namespace

AESAM::AESAM(Params& params) : SAM(params, ae_sam_defaults()) {
  delta_ = params.number("delta", 0.9, 0, 1);
  if (!(delta_ < 1)) params.fail("delta", "a number in [0, 1)", delta_);
  lambda1_ = params.number("lambda1", -1.0);
  lambda2_ = params.number("lambda2", 1.0);
}

std::shared_ptr<SAMOptimizer> AESAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                    const SAMOptions& options, const State& state) {
  return std::make_shared<AESAMOptimizer>(std::move(base), options, delta_, lambda1_, lambda2_, run_length(state));
}

AESAMOptimizer::AESAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double delta,
                               double lambda1, double lambda2, int64_t run_steps)
    : SAMOptimizer(std::move(base), options),
      delta_(delta),
      lambda1_(lambda1),
      lambda2_(lambda2),
      run_steps_(run_steps) {}

bool AESAMOptimizer::descend(std::vector<GroupView>& groups) {
  std::vector<at::Tensor> grads;
  for (const auto& g : groups) grads.insert(grads.end(), g.grads.begin(), g.grads.end());
  const double squared_norm = sum_of_squares(grads).item<double>();
  mean_ = delta_ * mean_ + (1 - delta_) * squared_norm;
  variance_ = delta_ * variance_ + (1 - delta_) * (squared_norm - mean_) * (squared_norm - mean_);
  // This step's index over the run's length; steps() already counts this one.
  const double progress =
      run_steps_ > 0 ? std::min(1.0, static_cast<double>(steps() - 1) / static_cast<double>(run_steps_)) : 0.0;
  const double threshold = progress * lambda1_ + (1 - progress) * lambda2_;
  return squared_norm >= mean_ + threshold * std::sqrt(variance_);
}

StateDict AESAMOptimizer::variant_values() const {
  StateDict values = new_state_dict();
  values.insert("mean", mean_);
  values.insert("variance", variance_);
  return values;
}

void AESAMOptimizer::load_variant_values(const StateDict& values) {
  if (!values.contains("mean") || !values.at("mean").isDouble() || !values.contains("variance") ||
      !values.at("variance").isDouble()) {
    throw std::invalid_argument("AE-SAM state has no numbers 'mean' and 'variance'");
  }
  mean_ = values.at("mean").toDouble();
  variance_ = values.at("variance").toDouble();
}

BASIN_REGISTER(algorithm_registry(), "ae_sam", AESAM);

}  // namespace basin
