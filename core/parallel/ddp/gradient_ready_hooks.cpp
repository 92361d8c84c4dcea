#include "basin/core/parallel/ddp/gradient_ready_hooks.h"

#include <utility>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace basin {
namespace {

/// Runs after a parameter's gradient accumulator: its gradient is final for this backward.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::shared_ptr<const std::function<void(std::size_t)>> ready, std::size_t index)
      : ready_(std::move(ready)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    (*ready_)(index_);
    return outputs;
  }

 private:
  std::shared_ptr<const std::function<void(std::size_t)>> ready_;
  std::size_t index_;
};

}  // namespace

GradientReadyHooks::GradientReadyHooks(const std::vector<at::Tensor>& params, std::function<void(std::size_t)> ready) {
  const auto shared = std::make_shared<const std::function<void(std::size_t)>>(std::move(ready));
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad()) continue;
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    keys_.push_back(accumulator->add_post_hook(std::make_unique<ReadyHook>(shared, i)));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradientReadyHooks::~GradientReadyHooks() { remove(); }

GradientReadyHooks::GradientReadyHooks(GradientReadyHooks&& other) noexcept
    : accumulators_(std::move(other.accumulators_)), keys_(std::move(other.keys_)) {
  other.accumulators_.clear();
  other.keys_.clear();
}

GradientReadyHooks& GradientReadyHooks::operator=(GradientReadyHooks&& other) noexcept {
  if (this != &other) {
    remove();
    accumulators_ = std::move(other.accumulators_);
    keys_ = std::move(other.keys_);
    other.accumulators_.clear();
    other.keys_.clear();
  }
  return *this;
}

void GradientReadyHooks::remove() {
  for (std::size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(keys_[i]);
  accumulators_.clear();
  keys_.clear();
}

}  // namespace basin
