#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace basin {

/// Sum of squares of all elements of `tensors`, accumulated in fp32 whatever
/// their dtype: a 0-dim float tensor on the tensors' device (0 when empty).
/// It is what ranks all-reduce when each holds a disjoint part of the gradients.
at::Tensor sum_of_squares(const std::vector<at::Tensor>& tensors);

/// The L2 norm of all `tensors` together, in fp32.
at::Tensor global_norm(const std::vector<at::Tensor>& tensors);

/// Scales gradients so that their global norm is at most `max_norm`; returns
/// the norm before clipping.
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm);

}  // namespace basin
