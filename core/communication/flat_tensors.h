#pragma once

#include <ATen/ATen.h>

namespace basin {

/// Collectives move many tensors as one: at::flatten_dense_tensors lays them
/// out one after another; this copies such a flat tensor back into them.
inline void copy_from_flat(const at::Tensor& flat, at::TensorList tensors) {
  const std::vector<at::Tensor> views = at::unflatten_dense_tensors(flat, tensors);
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(views[i]);
}

/// A tensor of `sizes` in `slot`'s memory (contiguous, of as many
/// elements). Not an autograd view of it: LibTorch 1.x's zero_grad()
/// detaches gradients in place, which a view refuses.
inline at::Tensor alias_of(const at::Tensor& slot, at::IntArrayRef sizes) {
  at::Tensor alias = at::empty({0}, slot.options());
  alias.set_(slot.storage(), slot.storage_offset(), sizes, slot.view(sizes).strides());
  return alias;
}

/// The elements of several tensors together.
inline int64_t numel_of(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

}  // namespace basin
