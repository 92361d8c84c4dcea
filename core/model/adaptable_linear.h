#pragma once

#include <cstdint>
#include <memory>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "basin/core/model/layer_perturbation.h"

namespace basin {

/// How an adapter's A starts (B starts at zero either way, so training
/// starts from the base model): nn.Linear's default, Kaiming-uniform with
/// a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)) (LoRA's code and PEFT's
/// default), or normal(0, 1/r) (PEFT's "gaussian").
enum class LoraInit { kKaiming, kGaussian };

/// One adapter's size and scale: y += scaling * dropout(x) A^T B^T.
struct LoraShape {
  int64_t rank = 8;
  double scaling = 2.0;  // alpha / r (or alpha / sqrt(r) under rsLoRA)
  double dropout = 0.0;  // on the adapter's input only
  LoraInit init = LoraInit::kKaiming;
};

/// One matrix of an adapter, a module of its own so that its parameter reads
/// as PEFT names it: `c_attn.lora_A.weight`.
class AdapterMatrix : public torch::nn::Module {
 public:
  explicit AdapterMatrix(at::Tensor value) { weight = register_parameter("weight", std::move(value)); }
  at::Tensor weight;
};

/// y = x W^T (+ b): the linear layer the language models build their
/// projections from, which a low-rank adapter (LoRA, Hu et al. 2021) can be
/// attached to: y = x W^T (+ b) + scaling * dropout(x) A^T B^T, with A
/// [r, in] and B [out, r] trained and W, b frozen (core/model/lora.h).
class AdaptableLinear : public torch::nn::Module {
 public:
  /// `weight` [out, in]; `bias` [out] or undefined.
  AdaptableLinear(at::Tensor weight, at::Tensor bias);

  at::Tensor forward(const at::Tensor& x) const;

  /// Registers lora_A and lora_B, drawn from `generator` (CPU, on the
  /// weight's dtype and device afterwards). Throws if already adapted.
  void attach_lora(const LoraShape& shape, at::Generator& generator);
  bool adapted() const { return lora_A != nullptr; }
  const LoraShape& lora_shape() const { return lora_; }
  /// scaling * B A, the adapter's change to W [out, in] (detached).
  at::Tensor adapter_delta() const;

  /// Hides the adapter from the module tree (named_parameters no longer
  /// lists it) and forward (its delta is in W then), and back: what an
  /// export of the merged model needs (MergedAdapters).
  void detach_adapter_modules();
  void reattach_adapter_modules();
  bool merged() const { return merged_; }

  /// Shares what an algorithm adds to this layer's training forward (null:
  /// nothing), which its owner arms.
  void set_perturbation(std::shared_ptr<const LayerPerturbation> perturbation) {
    perturbation_ = std::move(perturbation);
  }
  const LayerPerturbation* perturbation() const { return perturbation_.get(); }

  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  at::Tensor weight, bias;
  std::shared_ptr<AdapterMatrix> lora_A, lora_B;  // null until attach_lora

 private:
  LoraShape lora_;
  bool merged_ = false;
  std::shared_ptr<const LayerPerturbation> perturbation_;
};

}  // namespace basin
