#include "basin/core/model/adaptable_linear.h"

#include <cmath>
#include <stdexcept>

#include <torch/csrc/autograd/custom_function.h>

#include "basin/core/base/seeded_noise.h"

namespace basin {

AdaptableLinear::AdaptableLinear(at::Tensor weight, at::Tensor bias) {
  this->weight = register_parameter("weight", std::move(weight));
  if (bias.defined()) this->bias = register_parameter("bias", std::move(bias));
}

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

void AdaptableLinear::set_weight_noise(std::shared_ptr<const WeightNoise> noise, int64_t layer) {
  noise_ = std::move(noise);
  noise_layer_ = layer;
  row_std_step_ = -1;
}

at::Tensor AdaptableLinear::noise_row_std() const {
  if (row_std_step_ == noise_->step && row_std_.defined()) return row_std_;
  at::NoGradGuard no_grad;
  at::Tensor merged = weight.detach().to(at::kFloat);
  if (adapted()) merged = merged + adapter_delta().to(merged.device());
  row_std_ = merged.norm(2, {1}, /*keepdim=*/true).mul_(noise_->sigma / std::sqrt(static_cast<double>(in_features())));
  row_std_step_ = noise_->step;
  return row_std_;
}

at::Tensor AdaptableLinear::noisy_base(const at::Tensor& x) const {
  if (weight.requires_grad() || (bias.defined() && bias.requires_grad())) {
    throw std::logic_error("AdaptableLinear: weight noise (Flat-LoRA) is for a frozen weight");
  }
  const auto seed = static_cast<int64_t>(noise_seed(noise_->run_seed, noise_->step, noise_layer_));
  const at::Tensor y = NoisyLinear::apply(x, weight, seed, noise_row_std());
  return bias.defined() ? y + bias : y;  // apart: an undefined tensor cannot enter a custom function
}

namespace {

/// y + scaling * (x A^T) B^T with the sum in the second product's GEMM
/// (addmm), and the scale on B [out, r]: no [n, out] temporary besides the result.
at::Tensor add_low_rank(const at::Tensor& y, const at::Tensor& x, const at::Tensor& a, const at::Tensor& b,
                        double scaling) {
  const at::Tensor h = at::linear(x, a);
  const int64_t out = y.size(-1);
  return at::addmm(y.reshape({-1, out}), h.reshape({-1, h.size(-1)}), (b * scaling).t()).view(y.sizes());
}

}  // namespace

at::Tensor AdaptableLinear::forward(const at::Tensor& x) const {
  const bool noisy = noise_ != nullptr && noise_->active && noise_->sigma > 0 && is_training() && !merged_;
  const bool auxiliary = auxiliary_ != nullptr && *auxiliary_->armed && is_training() && !merged_;
  at::Tensor y = noisy ? noisy_base(x) : at::linear(x, weight, bias);
  if (!lora_A || merged_) return auxiliary ? add_low_rank(y, x, auxiliary_->A, auxiliary_->B, auxiliary_->scaling) : y;
  if (auxiliary && lora_.dropout == 0 && auxiliary_->scaling == lora_.scaling) {
    // Both adapters see x alike: one product of rank r + r2, [A; A2] then [B, B2].
    return add_low_rank(y, x, at::cat({lora_A->weight, auxiliary_->A.to(lora_A->weight.scalar_type())}),
                        at::cat({lora_B->weight, auxiliary_->B.to(lora_B->weight.scalar_type())}, 1), lora_.scaling);
  }
  if (auxiliary) y = add_low_rank(y, x, auxiliary_->A, auxiliary_->B, auxiliary_->scaling);
  const at::Tensor input = lora_.dropout > 0 ? at::dropout(x, lora_.dropout, is_training()) : x;
  return add_low_rank(y, input, lora_A->weight, lora_B->weight, lora_.scaling);
}

void AdaptableLinear::attach_lora(const LoraShape& shape, at::Generator& generator) {
  if (adapted()) throw std::logic_error("AdaptableLinear::attach_lora: the layer has an adapter already");
  lora_ = shape;
  const auto cpu = at::TensorOptions().dtype(at::kFloat);
  at::Tensor a = at::empty({shape.rank, in_features()}, cpu);
  if (shape.init == LoraInit::kKaiming) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features()));
    a.uniform_(-bound, bound, generator);
  } else {
    a.normal_(0.0, 1.0 / static_cast<double>(shape.rank), generator);
  }
  const auto like = weight.options().requires_grad(false);
  lora_A = register_module("lora_A", std::make_shared<AdapterMatrix>(a.to(like)));
  lora_B = register_module("lora_B", std::make_shared<AdapterMatrix>(at::zeros({out_features(), shape.rank}, like)));
}

at::Tensor AdaptableLinear::adapter_delta() const {
  at::NoGradGuard no_grad;
  return at::matmul(lora_B->weight.detach().to(at::kFloat), lora_A->weight.detach().to(at::kFloat)) * lora_.scaling;
}

void AdaptableLinear::detach_adapter_modules() {
  if (merged_) throw std::logic_error("AdaptableLinear: the adapter is merged already");
  unregister_module("lora_A");
  unregister_module("lora_B");
  merged_ = true;
}

void AdaptableLinear::reattach_adapter_modules() {
  if (!merged_) return;
  register_module("lora_A", lora_A);
  register_module("lora_B", lora_B);
  merged_ = false;
}

}  // namespace basin
