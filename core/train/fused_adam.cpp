#include "basin/core/train/fused_adam.h"

#include <memory>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "basin/core/optimizer_state.h"

namespace basin {

namespace {

bool fusable(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided &&
         t.is_contiguous();
}

float* floats(const at::Tensor& t) { return t.data_ptr<float>(); }

// LibTorch's Adam and AdamW, their state created as theirs is, each parameter updated by adam_update.
template <class Options, class State>
bool fused_step(torch::optim::Optimizer& optimizer, bool decoupled) {
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined() && (!fusable(p) || !fusable(p.grad()))) return false;
    }
  }
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
      const bool fused_state = fusable(state.exp_avg()) && fusable(state.exp_avg_sq()) &&
                               (!options.amsgrad() || fusable(state.max_exp_avg_sq()));
      TORCH_CHECK(fused_state, "Adam's state of a float32 parameter is not float32 and contiguous");
      state.step(state.step() + 1);
      const double decay = options.weight_decay();
      const AdamUpdate update{options.lr(), std::get<0>(options.betas()), std::get<1>(options.betas()), options.eps(),
                              decoupled ? 0.0 : decay, decoupled ? decay : 0.0, state.step()};
      adam_update(floats(p), floats(p.grad()), floats(state.exp_avg()), floats(state.exp_avg_sq()),
                  options.amsgrad() ? floats(state.max_exp_avg_sq()) : nullptr, p.numel(), update);
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
