#include "basin/core/optim/fused_adam.h"

#include <initializer_list>
#include <memory>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "basin/core/optim/optimizer_state.h"

namespace basin {

namespace {

bool fusable(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided &&
         t.is_contiguous();
}

float* floats(const at::Tensor& t) { return t.data_ptr<float>(); }

// Whether every parameter with a gradient, its gradient and any state it already has can be fused. Decided
// for the whole step before anything moves: one that cannot sends every parameter to LibTorch's step, so a
// step is never half ours and half theirs (a state LibTorch cannot step either fails there, with its message).
template <class Options, class State>
bool all_fusable(torch::optim::Optimizer& optimizer) {
  auto& states = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const bool amsgrad = static_cast<const Options&>(group.options()).amsgrad();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!fusable(p) || !fusable(p.grad())) return false;
      const auto slot = states.find(optimizer_state_key(p));
      if (slot == states.end()) continue;
      // A state read from a file may keep its saved strides, or lack max_exp_avg_sq (AMSGrad turned on at resume).
      const auto& state = static_cast<const State&>(*slot->second);
      if (!fusable(state.exp_avg()) || !fusable(state.exp_avg_sq()) || (amsgrad && !fusable(state.max_exp_avg_sq()))) {
        return false;
      }
    }
  }
  return true;
}

// Written through raw pointers, so autograd is told as an in-place operation would tell it: a graph that
// saved one of these tensors then fails on backward instead of using the new values.
void bump_versions(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors) {
    if (t->defined()) t->unsafeGetTensorImpl()->bump_version();
  }
}

// LibTorch's Adam and AdamW, their state created as theirs is, each parameter updated by adam_update.
template <class Options, class State>
bool fused_step(torch::optim::Optimizer& optimizer, bool decoupled) {
  if (!all_fusable<Options, State>(optimizer)) return false;
  auto& states = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = states[optimizer_state_key(p)];
      if (!slot) {
        auto fresh = std::make_unique<State>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        if (options.amsgrad()) fresh->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<State&>(*slot);
      state.step(state.step() + 1);
      const double decay = options.weight_decay();
      const AdamUpdate update{options.lr(), std::get<0>(options.betas()), std::get<1>(options.betas()), options.eps(),
                              decoupled ? 0.0 : decay, decoupled ? decay : 0.0, state.step()};
      const at::Tensor max_exp_avg_sq = options.amsgrad() ? state.max_exp_avg_sq() : at::Tensor();
      adam_update(floats(p), floats(p.grad()), floats(state.exp_avg()), floats(state.exp_avg_sq()),
                  max_exp_avg_sq.defined() ? floats(max_exp_avg_sq) : nullptr, p.numel(), update);
      bump_versions({&p, &state.exp_avg(), &state.exp_avg_sq(), &max_exp_avg_sq});
    }
  }
  return true;
}

at::Tensor loss_of(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

}  // namespace

at::Tensor FusedAdam::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  at::Tensor loss = loss_of(closure);
  if (!fused_step<torch::optim::AdamOptions, torch::optim::AdamParamState>(*this, /*decoupled=*/false)) {
    torch::optim::Adam::step(nullptr);
  }
  return loss;
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  at::Tensor loss = loss_of(closure);
  if (!fused_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(*this, /*decoupled=*/true)) {
    torch::optim::AdamW::step(nullptr);
  }
  return loss;
}

}  // namespace basin
