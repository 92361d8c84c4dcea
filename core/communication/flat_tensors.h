#pragma once

#include <ATen/ATen.h>

namespace basin {

/// Collectives move many tensors as one: at::flatten_dense_tensors lays them
/// out one after another; this copies such a flat tensor back into them.
inline void copy_from_flat(const at::Tensor& flat, at::TensorList tensors) {
  const std::vector<at::Tensor> views = at::unflatten_dense_tensors(flat, tensors);
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(views[i]);
}

}  // namespace basin
