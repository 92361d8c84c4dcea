#include "basin/core/grad_norm.h"

#include <ATen/ATen.h>

namespace basin {

at::Tensor sum_of_squares(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return at::zeros({}, at::kFloat);
  const bool all_fp32 = std::all_of(tensors.begin(), tensors.end(), [&tensors](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat && t.device() == tensors.front().device();
  });
  std::vector<at::Tensor> norms;
  if (all_fp32) {
    norms = at::_foreach_norm(tensors, 2);  // one multi-tensor kernel on CUDA
  } else {
    norms.reserve(tensors.size());
    for (const auto& t : tensors) {
      norms.push_back(at::linalg_vector_norm(t, 2, c10::nullopt, false, at::kFloat).to(tensors.front().device()));
    }
  }
  return at::stack(norms).square().sum();
}

at::Tensor global_norm(const std::vector<at::Tensor>& tensors) { return sum_of_squares(tensors).sqrt(); }

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm) {
  const at::Tensor norm = global_norm(grads);
  const double total = norm.item<double>();
  if (total > max_norm && !grads.empty()) {
    at::NoGradGuard no_grad;
    at::_foreach_mul_(grads, max_norm / (total + 1e-6));
  }
  return norm;
}

}  // namespace basin
