#pragma once

#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

namespace basin {

/// A copy of the ascent (clean) gradients g(w), kept for the descent step by
/// the variants that combine it with g(w + e) (GSAM, WSAM). Its buffers are
/// allocated once and reused: one extra gradient's worth of memory.
class CleanGradients {
 public:
  /// Copies each parameter's current gradient.
  void take(const std::vector<at::Tensor>& params);
  /// The kept gradient of `param`; nullptr when it had none.
  const at::Tensor* of(const at::Tensor& param) const;

 private:
  std::unordered_map<const c10::TensorImpl*, at::Tensor> kept_;
  std::unordered_map<const c10::TensorImpl*, bool> fresh_;
};

}  // namespace basin
