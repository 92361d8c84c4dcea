#include "basin/core/train/activation_checkpoint.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/nn/module.h>

#include "basin/core/base/torch_compat.h"

namespace basin {

namespace {

/// The generators a unit's forward may draw from, and their states.
class RandomState {
 public:
  explicit RandomState(c10::Device device) {
    keep(at::detail::getDefaultCPUGenerator());
    if (device.type() != c10::kCPU) keep(at::globalContext().defaultGenerator(device));
  }
  void restore() const {
    for (const auto& [generator, state] : states_) {
      at::Generator g = generator;
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(state);
    }
  }

 private:
  void keep(at::Generator generator) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    states_.emplace_back(generator, generator.get_state());
  }
  std::vector<std::pair<at::Generator, at::Tensor>> states_;
};

/// Autocast as the forward had it on one device type, put back on for the recompute.
class AutocastAsItWas {
 public:
  explicit AutocastAsItWas(c10::DeviceType device)
      : device_(device), enabled_(compat::autocast_enabled(device)), dtype_(compat::autocast_dtype(device)) {}
  void enter() {
    previous_enabled_ = compat::autocast_enabled(device_);
    previous_dtype_ = compat::autocast_dtype(device_);
    compat::set_autocast_enabled(device_, enabled_);
    compat::set_autocast_dtype(device_, dtype_);
    if (enabled_) at::autocast::increment_nesting();
  }
  void leave() {
    if (enabled_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::set_autocast_enabled(device_, previous_enabled_);
    compat::set_autocast_dtype(device_, previous_dtype_);
  }

 private:
  c10::DeviceType device_;
  bool enabled_;
  at::ScalarType dtype_;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

class RecomputeBackward : public torch::autograd::Node {
 public:
  RecomputeBackward(torch::nn::Module& unit, at::Tensor input, UnitForward forward, RunAgain run_again)
      : unit_(unit),
        input_(std::move(input)),
        input_requires_grad_(input_.requires_grad()),
        forward_(std::move(forward)),
        run_again_(std::move(run_again)),
        random_(input_.device()),
        autocast_(input_.device().type()) {}

  std::string name() const override { return "basin::RecomputeBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    at::Tensor input = input_.detach();
    if (input_requires_grad_) input.requires_grad_(true);
    const RandomState now(input.device());
    std::vector<at::Tensor> buffers, kept;
    for (const auto& b : unit_.buffers(/*recurse=*/true)) buffers.push_back(b), kept.push_back(b.detach().clone());
    at::Tensor output;
    random_.restore();
    autocast_.enter();
    try {
      at::AutoGradMode grad(true);
      output = run_again_([&] { return forward_(input); });
    } catch (...) {
      autocast_.leave();
      now.restore();
      throw;
    }
    autocast_.leave();
    now.restore();
    {
      // Through an alias with a version of its own: the recompute's graph saved these buffers.
      at::NoGradGuard no_grad;
      for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].variable_data().copy_(kept[i]);
    }
    if (output.requires_grad() && grads.at(0).defined()) torch::autograd::backward({output}, {grads[0]});
    return {input_requires_grad_ ? input.grad() : at::Tensor()};
  }

  void release_variables() override {
    input_.reset();
    forward_ = nullptr;
    run_again_ = nullptr;
  }

 private:
  torch::nn::Module& unit_;
  at::Tensor input_;
  bool input_requires_grad_;
  UnitForward forward_;
  RunAgain run_again_;
  RandomState random_;
  AutocastAsItWas autocast_;
};

}  // namespace

at::Tensor forward_without_activations(torch::nn::Module& unit, const at::Tensor& input, UnitForward forward,
                                       RunAgain run_again) {
  bool trains = input.requires_grad();
  for (const auto& p : unit.parameters(/*recurse=*/true)) trains = trains || p.requires_grad();
  if (!trains || !at::GradMode::is_enabled()) return forward(input);
  // Captured before the forward draws or casts anything.
  auto node = std::shared_ptr<RecomputeBackward>(new RecomputeBackward(unit, input, forward, std::move(run_again)),
                                                 torch::autograd::deleteNode);
  at::Tensor output;
  {
    at::NoGradGuard no_grad;
    // Nothing autocast casts here is needed again: its cache would keep a
    // low-precision copy of each weight, made without a graph, for nothing.
    const bool caching = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    try {
      output = forward(input);
    } catch (...) {
      at::autocast::set_autocast_cache_enabled(caching);
      throw;
    }
    at::autocast::set_autocast_cache_enabled(caching);
    // The output takes the recompute as its history: a view (of the input) or the input itself gets its own tensor.
    if (output.is_view() || output.is_same(input)) output = output.clone();
  }
  node->set_next_edges(torch::autograd::collect_next_edges(input));
  torch::autograd::create_gradient_edge(output, node);
  return output;
}

}  // namespace basin
