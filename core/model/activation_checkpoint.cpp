#include "basin/core/model/activation_checkpoint.h"

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
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
  bool same_as(const RandomState& other) const {
    for (std::size_t i = 0; i < states_.size(); ++i) {
      if (!at::equal(states_[i].second, other.states_[i].second)) return false;
    }
    return true;
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

/// Runs `undo` when its scope ends, by an exception or not.
class Finally {
 public:
  explicit Finally(std::function<void()> undo) : undo_(std::move(undo)) {}
  ~Finally() { undo_(); }
  Finally(const Finally&) = delete;
  Finally& operator=(const Finally&) = delete;

 private:
  std::function<void()> undo_;
};

class RecomputeBackward : public torch::autograd::Node {
 public:
  RecomputeBackward(torch::nn::Module& unit, at::Tensor input, UnitForward forward, RunAgain run_again)
      : unit_(unit),
        input_(std::move(input)),
        input_version_(input_._version()),
        input_requires_grad_(input_.requires_grad()),
        forward_(std::move(forward)),
        run_again_(std::move(run_again)),
        autocast_(input_.device().type()) {}

  /// The generators' state at the forward's start, kept only when the forward drew from them.
  void keep_random_state(std::unique_ptr<RandomState> state) { random_ = std::move(state); }

  std::string name() const override { return "basin::RecomputeBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!forward_) {
      throw std::runtime_error("backward ran through a checkpointed unit a second time; its recompute runs once "
                               "(retain_graph is not supported through activation checkpointing)");
    }
    if (!torch::autograd::Engine::get_default_engine().is_checkpoint_valid()) {
      throw std::runtime_error("a checkpointed unit's recompute accumulates into every parameter's .grad, so it "
                               "runs under backward() only, not autograd::grad() or backward(inputs=...)");
    }
    if (input_._version() != input_version_) {
      throw std::runtime_error("the input of a checkpointed unit was modified in place after its forward; its "
                               "recompute would see other values");
    }
    at::Tensor input = input_.detach();
    if (input_requires_grad_) input.requires_grad_(true);
    at::Tensor output;
    {
      // What the recompute changes is put back as backward had it: the
      // generators, autocast, and the unit's buffers (BatchNorm's statistics,
      // written through an alias with a version of its own: the recompute's
      // graph saved them).
      std::vector<at::Tensor> buffers, kept;
      for (const auto& b : unit_.buffers(/*recurse=*/true)) buffers.push_back(b), kept.push_back(b.detach().clone());
      std::unique_ptr<RandomState> now;
      if (random_) now = std::make_unique<RandomState>(input.device()), random_->restore();
      autocast_.enter();
      Finally put_back([&] {
        autocast_.leave();
        if (now) now->restore();
        at::NoGradGuard no_grad;
        for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].variable_data().copy_(kept[i]);
      });
      at::AutoGradMode grad(true);
      output = run_again_([&] { return forward_(input); });
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
  int64_t input_version_;
  bool input_requires_grad_;
  UnitForward forward_;
  RunAgain run_again_;
  std::unique_ptr<RandomState> random_;
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
  auto before = std::make_unique<RandomState>(input.device());
  at::Tensor output;
  {
    at::NoGradGuard no_grad;
    // Nothing autocast casts here is needed again: its cache would keep a
    // low-precision copy of each weight, made without a graph, for nothing.
    const bool caching = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    Finally cache_back([caching] { at::autocast::set_autocast_cache_enabled(caching); });
    output = forward(input);
    // The output takes the recompute as its history: one that has a history
    // of its own, a view (of the input) or the input itself gets its own tensor.
    if (output.requires_grad() || output.is_view() || output.is_same(input)) output = output.clone();
  }
  // A forward that drew nothing (no dropout) has no generator to put back:
  // its recompute then leaves the generators alone.
  if (!before->same_as(RandomState(input.device()))) node->keep_random_state(std::move(before));
  node->set_next_edges(torch::autograd::collect_next_edges(input));
  torch::autograd::create_gradient_edge(output, node);
  return output;
}

}  // namespace basin
