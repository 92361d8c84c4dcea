#include "basin/algorithms/sam/clean_gradients.h"

namespace basin {

void CleanGradients::take(const std::vector<at::Tensor>& params) {
  for (auto& entry : fresh_) entry.second = false;
  for (const auto& p : params) {
    const at::Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    at::Tensor& kept = kept_[p.unsafeGetTensorImpl()];
    if (kept.defined() && kept.sizes() == grad.sizes() && kept.dtype() == grad.dtype() && kept.device() == grad.device()) {
      kept.copy_(grad);
    } else {
      kept = grad.detach().clone();
    }
    fresh_[p.unsafeGetTensorImpl()] = true;
  }
}

const at::Tensor* CleanGradients::of(const at::Tensor& param) const {
  const auto fresh = fresh_.find(param.unsafeGetTensorImpl());
  if (fresh == fresh_.end() || !fresh->second) return nullptr;
  return &kept_.at(param.unsafeGetTensorImpl());
}

}  // namespace basin
