#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace basin {

/// Scratch tensors shaped like a set of tensors: allocated when that set
/// changes (in practice the first step) and reused afterwards, so per-step
/// code allocates nothing.
class ReusedBuffers {
 public:
  /// Makes one buffer per tensor of `like` (same shape, dtype, device and
  /// layout), reusing the current ones when `like` is the same set of tensors.
  void match(const std::vector<at::Tensor>& like);

  /// The tensors the buffers were made for, and the buffers, index by index.
  const std::vector<at::Tensor>& sources() const { return sources_; }
  std::vector<at::Tensor>& buffers() { return buffers_; }
  const std::vector<at::Tensor>& buffers() const { return buffers_; }

 private:
  std::vector<at::Tensor> sources_;
  std::vector<at::Tensor> buffers_;
};

}  // namespace basin
