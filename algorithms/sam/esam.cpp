#include "basin/algorithms/esam.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/core/random.h"

namespace basin {

ESAM::ESAM(Params& params) : SAM(params) {
  beta_ = params.number("beta", 0.6, 0, 1);
  if (beta_ <= 0) params.fail("beta", "a probability in (0, 1]", Json(beta_));
  gamma_ = params.number("gamma", 0.5, 0, 1);
  if (gamma_ <= 0) params.fail("gamma", "a share of the batch in (0, 1]", Json(gamma_));
}

std::shared_ptr<SAMOptimizer> ESAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                   const SAMOptions& options, const State& state) {
  return std::make_shared<ESAMOptimizer>(std::move(base), options, beta_, gamma_, static_cast<uint64_t>(state.seed));
}

ESAMOptimizer::ESAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double beta,
                             double gamma, uint64_t seed)
    : SAMOptimizer(std::move(base), options), beta_(beta), gamma_(gamma), seed_(seed) {
  if (!(beta > 0 && beta <= 1)) throw std::invalid_argument("ESAM: beta must be in (0, 1]");
  if (!(gamma > 0 && gamma <= 1)) throw std::invalid_argument("ESAM: gamma must be in (0, 1]");
  if (options.parts != 1) throw std::invalid_argument("ESAM: the batch is not split into parts");
}

std::unordered_set<const c10::TensorImpl*> ESAMOptimizer::resting_tensors(int64_t step) {
  std::unordered_set<const c10::TensorImpl*> resting;
  if (beta_ >= 1) return resting;
  // One draw per tensor, in group order, from a stream fixed by (seed, step).
  Rng rng(seed_ ^ 0xE5A3ULL, static_cast<uint64_t>(step));
  for (const auto& g : parameter_groups(/*perturbed_only=*/true)) {
    for (const auto& p : g.params) {
      if (rng.uniform() >= beta_) resting.insert(p.unsafeGetTensorImpl());
    }
  }
  return resting;
}

void ESAMOptimizer::before_ascent() {
  auto resting = resting_tensors(steps() - 1);  // steps() already counts this step
  // A draw that rests every tensor the loss reaches leaves nothing to perturb
  // (and no gradient to take): a plain step with the ascent's gradients,
  // taken for every tensor. The tensors the loss reaches are those with a
  // gradient from the step before (all of them before the first).
  bool any_graded = false, chosen_graded = false;
  for (const auto& g : parameter_groups(/*perturbed_only=*/true)) {
    for (const auto& p : g.params) {
      if (!p.grad().defined()) continue;
      any_graded = true;
      chosen_graded = chosen_graded || resting.count(p.unsafeGetTensorImpl()) == 0;
    }
  }
  std::size_t perturbable = 0;
  for (const auto& g : parameter_groups(/*perturbed_only=*/true)) perturbable += g.params.size();
  all_resting_ = any_graded ? !chosen_graded : resting.size() == perturbable;
  if (all_resting_) return;
  for (const auto& g : parameter_groups(/*perturbed_only=*/true)) {
    for (const auto& p : g.params) {
      if (resting.count(p.unsafeGetTensorImpl()) == 0) continue;
      // No weight gradient for it in this pass: autograd skips that work.
      frozen_.push_back(p);
      at::Tensor(p).requires_grad_(false);
    }
  }
  rest_this_step(std::move(resting));
}

void ESAMOptimizer::after_ascent() {
  for (auto& p : frozen_) p.requires_grad_(true);
  frozen_.clear();
}

bool ESAMOptimizer::descend(std::vector<GroupView>& /*groups*/) { return !all_resting_; }

std::vector<SAMOptimizer::Perturbation> ESAMOptimizer::perturbation(std::vector<GroupView>& groups) {
  // SAM's e over the chosen tensors (the resting ones are not in `groups`), scaled by 1 / beta.
  auto result = SAMOptimizer::perturbation(groups);
  for (auto& p : result) p.scale /= beta_;
  return result;
}

at::Tensor ESAMOptimizer::descent_samples(const at::Tensor& ascent_losses, const LossClosure& closure) {
  if (gamma_ >= 1) return {};
  const int64_t n = ascent_losses.numel();
  const int64_t keep = std::clamp<int64_t>(std::llround(gamma_ * static_cast<double>(n)), 1, n);
  if (keep == n) return {};  // every sample: no forward needed to rank them
  const at::Tensor after = forward_at_current_weights(closure);
  if (after.sizes() != ascent_losses.sizes()) {
    throw std::logic_error("ESAM: the forward at w + e returned " + std::to_string(after.numel()) +
                           " sample losses, the ascent " + std::to_string(ascent_losses.numel()));
  }
  const at::Tensor rise = (after.to(at::kCPU, at::kDouble) - ascent_losses.to(at::kCPU, at::kDouble));
  // The samples whose loss rose most, in batch order.
  return std::get<0>(std::get<1>(at::topk(rise, keep)).sort());
}

BASIN_REGISTER(algorithm_registry(), "esam", ESAM);

}  // namespace basin
