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

class ShardedParameters;

/// The sum of squares of `values` (one per tensor of `params`) over every
/// rank, each counting those of the parameters counted there
/// (ShardedParameters::counted_here: under ZeRO-2 it may hold no others): one
/// all-reduce. The same fp32 sum on every rank.
at::Tensor sum_of_squares_over_shards(const std::vector<at::Tensor>& values, const std::vector<at::Tensor>& params,
                                      ShardedParameters& shards);

/// The L2 norm of `values` (one per tensor of `params`) when each rank holds
/// all of them but owns a disjoint part: each rank sums the squares of what it
/// owns, one all-reduce adds the parts. Every rank gets the same fp32 norm
/// for 1/N of the work.
at::Tensor global_norm_over_shards(const std::vector<at::Tensor>& values, const std::vector<at::Tensor>& params,
                                   ShardedParameters& shards);

/// Scales gradients so that their global norm is at most `max_norm`; returns
/// the norm before clipping. With `shards`, the norm is taken over shards.
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm,
                          const std::vector<at::Tensor>& params = {}, ShardedParameters* shards = nullptr);

}  // namespace basin
