#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::nn { class Module; }

namespace basin {

/// An exact copy of a module's buffers (BatchNorm running mean, variance and
/// batch count), taken and put back without allocating after the first use.
///
/// SAM's descent pass runs the model forward a second time; without this,
/// BatchNorm would count that batch twice, and at the perturbed weights.
class BufferSnapshot {
 public:
  void take(torch::nn::Module& module);
  void restore();
  bool empty() const { return buffers_.empty(); }

 private:
  std::vector<at::Tensor> buffers_;
  std::vector<at::Tensor> copies_;
};

}  // namespace basin
