#include "basin/core/model/adaptable_linear.h"

#include <cmath>
#include <stdexcept>

namespace basin {

AdaptableLinear::AdaptableLinear(at::Tensor weight, at::Tensor bias) {
  this->weight = register_parameter("weight", std::move(weight));
  if (bias.defined()) this->bias = register_parameter("bias", std::move(bias));
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
  const LayerPerturbation* perturbed =
      perturbation_ != nullptr && is_training() && !merged_ && perturbation_->active() ? perturbation_.get() : nullptr;
  at::Tensor y = perturbed != nullptr ? perturbed->base_output(*this, x) : at::Tensor();
  if (!y.defined()) y = at::linear(x, weight, bias);
  const LayerPerturbation::LowRank* extra = perturbed != nullptr ? perturbed->low_rank() : nullptr;
  if (!lora_A || merged_) return extra != nullptr ? add_low_rank(y, x, extra->A, extra->B, extra->scaling) : y;
  if (extra != nullptr && lora_.dropout == 0 && extra->scaling == lora_.scaling) {
    // Both adapters see x alike: one product of rank r + r2, [A; A2] then [B, B2].
    return add_low_rank(y, x, at::cat({lora_A->weight, extra->A.to(lora_A->weight.scalar_type())}),
                        at::cat({lora_B->weight, extra->B.to(lora_B->weight.scalar_type())}, 1), lora_.scaling);
  }
  if (extra != nullptr) y = add_low_rank(y, x, extra->A, extra->B, extra->scaling);
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
