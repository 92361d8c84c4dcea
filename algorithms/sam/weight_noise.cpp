#include "basin/algorithms/sam/weight_noise.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "basin/core/base/seeded_noise.h"
#include "basin/core/model/adaptable_linear.h"

namespace basin {

namespace {

/// W's noise for one step: [out, in], in `like`'s dtype and device.
at::Tensor weight_noise(int64_t seed, const at::Tensor& row_std, const at::Tensor& like) {
  const at::Tensor unit = seeded_normal_rows(static_cast<uint64_t>(seed), 0, like.size(0), like.size(1));
  return unit.to(like.device()).mul_(row_std).to(like.scalar_type());
}

/// y = x (W + e)^T for a frozen W, e regenerated from its seed in
/// backward instead of kept: the graph holds W (as at::linear's would) and
/// a standard deviation per row.
class NoisyLinear : public torch::autograd::Function<NoisyLinear> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            int64_t seed, const at::Tensor& row_std) {
    ctx->save_for_backward({weight, row_std});
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(x.scalar_type());
    return at::linear(x, weight + weight_noise(seed, row_std, weight));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& grad = grads.at(0);
    const at::Tensor noisy = saved[0] + weight_noise(ctx->saved_data["seed"].toInt(), saved[1], saved[0]);
    const auto input_dtype = static_cast<at::ScalarType>(ctx->saved_data["input_dtype"].toInt());
    return {at::matmul(grad, noisy.to(grad.scalar_type())).to(input_dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor WeightNoise::row_std(const AdaptableLinear& layer) const {
  if (row_std_step_ == step_->step && row_std_.defined()) return row_std_;
  at::NoGradGuard no_grad;
  at::Tensor merged = layer.weight.detach().to(at::kFloat);
  if (layer.adapted()) merged = merged + layer.adapter_delta().to(merged.device());
  row_std_ = merged.norm(2, {1}, /*keepdim=*/true).mul_(step_->sigma / std::sqrt(static_cast<double>(layer.in_features())));
  row_std_step_ = step_->step;
  return row_std_;
}

at::Tensor WeightNoise::base_output(const AdaptableLinear& layer, const at::Tensor& x) const {
  if (layer.weight.requires_grad() || (layer.bias.defined() && layer.bias.requires_grad())) {
    throw std::logic_error("AdaptableLinear: weight noise (Flat-LoRA) is for a frozen weight");
  }
  const auto seed = static_cast<int64_t>(noise_seed(step_->run_seed, step_->step, layer_));
  const at::Tensor y = NoisyLinear::apply(x, layer.weight, seed, row_std(layer));
  return layer.bias.defined() ? y + layer.bias : y;  // apart: an undefined tensor cannot enter a custom function
}

}  // namespace basin
