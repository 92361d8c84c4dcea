#include "basin/core/sharding/grad_norm.h"

#include <ATen/ATen.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

namespace {

// One fp32 norm per tensor: a multi-tensor kernel when the dtypes allow it.
std::vector<at::Tensor> norms_of(const std::vector<at::Tensor>& tensors) {
  const bool all_fp32 = std::all_of(tensors.begin(), tensors.end(), [&tensors](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat && t.device() == tensors.front().device();
  });
  if (all_fp32) return at::_foreach_norm(tensors, 2);
  std::vector<at::Tensor> norms;
  norms.reserve(tensors.size());
  for (const auto& t : tensors) {
    // Narrower floats accumulate in fp32; double keeps its own precision until
    // the result (LibTorch 2.x refuses a norm that narrows its input).
    const bool narrow = c10::elementSize(t.scalar_type()) < c10::elementSize(at::kFloat);
    norms.push_back(at::linalg_vector_norm(t, 2, c10::nullopt, false, narrow ? at::kFloat : t.scalar_type())
                        .to(at::TensorOptions(at::kFloat).device(tensors.front().device())));
  }
  return norms;
}

}  // namespace

at::Tensor sum_of_squares(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return at::zeros({}, at::kFloat);
  return at::stack(norms_of(tensors)).square().sum();
}

at::Tensor global_norm(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return at::zeros({}, at::kFloat);
  return at::linalg_vector_norm(at::stack(norms_of(tensors)), 2);
}

at::Tensor sum_of_squares_over_shards(const std::vector<at::Tensor>& values, const std::vector<at::Tensor>& params,
                                      ShardedParameters& shards) {
  std::vector<at::Tensor> owned;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (shards.counted_here(params[i])) owned.push_back(values[i]);
  }
  // On the shards' device even where this rank holds nothing (ZeRO-2): NCCL takes CUDA tensors only.
  std::vector<at::Tensor> sum{sum_of_squares(owned).to(shards.device()).reshape({1})};
  shards.communicator().all_reduce_sum(sum);
  return sum.front().reshape({});
}

at::Tensor global_norm_over_shards(const std::vector<at::Tensor>& values, const std::vector<at::Tensor>& params,
                                   ShardedParameters& shards) {
  return sum_of_squares_over_shards(values, params, shards).sqrt();
}

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm, const std::vector<at::Tensor>& params,
                          ShardedParameters* shards) {
  const at::Tensor norm = shards != nullptr ? global_norm_over_shards(grads, params, *shards) : global_norm(grads);
  const double total = norm.item<double>();
  if (total > max_norm && !grads.empty()) {
    at::NoGradGuard no_grad;
    at::_foreach_mul_(grads, max_norm / (total + 1e-6));
  }
  return norm;
}

}  // namespace basin
