#include "basin/core/train/step_checks.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/optim/loss_scaler.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/sharding/grad_norm.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

namespace {

std::vector<at::Tensor> gradients_of(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());  // undefined: the parameter took no part
  }
  return grads;
}

}  // namespace

StepChecks::StepChecks(Params& root) {
  grad_clip_norm_ = root.number("grad_clip_norm", 0.0, 0.0);
  Params nonfinite = root.object("nonfinite_loss");
  skip_nonfinite_ = nonfinite.boolean("skip", true);
  max_nonfinite_steps_ = nonfinite.integer("max_consecutive", 10, 0);
  nonfinite.finish();
}

bool StepChecks::pass_loss_finite(const State& state) {
  bool finite = !pass_loss_.defined() || at::isfinite(pass_loss_).all().item<bool>();
  if (state.communicator && state.communicator->world_size() > 1) {
    std::vector<at::Tensor> flag{at::full({1}, finite ? 0.0f : 1.0f).to(state.device)};
    state.communicator->all_reduce_max(flag);
    finite = flag.front().item<float>() == 0;
  }
  if (!finite) nonfinite_in_step_ = true;
  return finite;
}

PassHooks StepChecks::pass_hooks(State& state, ShardedParameters* sharded) {
  PassHooks hooks;
  hooks.gradients_finite = [this, &state](Pass) {
    // A grad scaler checks the gradients; without one the loss is checked.
    if (state.scaler) {
      return state.scaler->unscale_and_check(gradients_of(unique_parameters(*state.optimizer)),
                                             state.communicator.get());
    }
    return !skip_nonfinite_ || pass_loss_finite(state);
  };
  hooks.before_base_step = [this, &state, sharded] {
    if (grad_clip_norm_ <= 0) return;
    std::vector<at::Tensor> grads, params;
    for (const auto& p : unique_parameters(*state.optimizer)) {
      if (!p.grad().defined()) continue;
      grads.push_back(p.grad());
      params.push_back(p);
    }
    if (sharded == nullptr) {
      clip_grad_norm(grads, grad_clip_norm_);
    } else {
      clip_grad_norm(grads, grad_clip_norm_, params, sharded);  // the norm over shards
    }
  };
  return hooks;
}

void StepChecks::end_step(int64_t step) {
  nonfinite_streak_ = nonfinite_in_step_ ? nonfinite_streak_ + 1 : 0;
  // A run that keeps producing them stops before anything more is saved.
  if (nonfinite_in_step_ && max_nonfinite_steps_ > 0 && nonfinite_streak_ >= max_nonfinite_steps_) {
    throw std::runtime_error("the training loss was not finite in " + std::to_string(nonfinite_streak_) +
                             " consecutive steps (up to step " + std::to_string(step) +
                             "), so training stops; every checkpoint already written is intact. Lower the "
                             "learning rate, clip gradients (grad_clip_norm) or raise "
                             "nonfinite_loss.max_consecutive");
  }
}

}  // namespace basin
