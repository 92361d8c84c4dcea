// mSAM's parts (SAMOptions::parts): each part's descent gradients are
// summed by parameter, and the base steps with their mean.
#include "basin/algorithms/sam/sam_optimizer.h"

#include <ATen/ATen.h>

namespace basin {

void SAMOptimizer::add_to_descent_sum() {
  // Summed by parameter: a part may leave a parameter without a gradient.
  at::NoGradGuard no_grad;
  for (const auto& g : views(/*perturbed_only=*/false, /*with_grads=*/true)) {
    for (std::size_t j = 0; j < g.params.size(); ++j) {
      const auto [found, added] = summed_index_.emplace(g.params[j].unsafeGetTensorImpl(), summed_descent_.size());
      if (added) {
        summed_descent_.emplace_back(g.params[j], g.grads[j].clone());
      } else {
        summed_descent_[found->second].second.add_(g.grads[j]);
      }
    }
  }
}

void SAMOptimizer::take_descent_mean() {
  at::NoGradGuard no_grad;
  const double parts = static_cast<double>(options_.parts);
  for (auto& [param, sum] : summed_descent_) {
    at::Tensor& grad = param.mutable_grad();
    if (grad.defined()) {
      grad.copy_(sum).div_(parts);
    } else {
      grad = sum.div_(parts);
    }
  }
}

}  // namespace basin
