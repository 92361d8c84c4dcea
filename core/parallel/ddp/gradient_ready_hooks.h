#pragma once

// When a parameter's gradient is final in a backward: what a gradient sync
// that overlaps backward waits for (ddp's buckets, zero3's reduce-scatters).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace basin {

/// Calls `ready(i)` each time backward has accumulated the gradient of
/// `params[i]`: a post hook on the parameter's gradient accumulator, for each
/// parameter that requires a gradient when the hooks are made (a frozen one
/// has no accumulator). The hooks live as long as this object.
class GradientReadyHooks {
 public:
  GradientReadyHooks() = default;
  GradientReadyHooks(const std::vector<at::Tensor>& params, std::function<void(std::size_t)> ready);
  ~GradientReadyHooks();
  GradientReadyHooks(const GradientReadyHooks&) = delete;
  GradientReadyHooks& operator=(const GradientReadyHooks&) = delete;
  GradientReadyHooks(GradientReadyHooks&& other) noexcept;
  GradientReadyHooks& operator=(GradientReadyHooks&& other) noexcept;

  /// No parameter is hooked.
  bool empty() const { return keys_.empty(); }

 private:
  void remove();

  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: autograd holds them weakly
  std::vector<uintptr_t> keys_;
};

}  // namespace basin
