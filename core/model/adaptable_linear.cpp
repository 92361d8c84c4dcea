#include "basin/core/model/adaptable_linear.h"

#include <cmath>
#include <stdexcept>

namespace basin {

AdaptableLinear::AdaptableLinear(at::Tensor weight, at::Tensor bias) {
  this->weight = register_parameter("weight", std::move(weight));
  if (bias.defined()) this->bias = register_parameter("bias", std::move(bias));
}

at::Tensor AdaptableLinear::forward(const at::Tensor& x) const {
  at::Tensor y = at::linear(x, weight, bias);
  if (!lora_A || merged_) return y;
  const at::Tensor input = lora_.dropout > 0 ? at::dropout(x, lora_.dropout, is_training()) : x;
  return y + at::linear(at::linear(input, lora_A->weight), lora_B->weight) * lora_.scaling;
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
