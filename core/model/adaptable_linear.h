#pragma once

#include <cstdint>
#include <memory>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

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

/// Noise an adapted layer adds to its frozen weight while it trains
/// (Flat-LoRA), set by the algorithm that owns it: while `active`, row i of
/// W gets N(0, (sigma ||W'_i|| / sqrt(in))^2) with W' = W + scaling B A,
/// drawn row by row from noise_seed(run_seed, step, layer), so that any
/// sharding draws what one process draws. It is regenerated in backward,
/// never kept, and W itself is never changed.
struct WeightNoise {
  bool active = false;
  uint64_t run_seed = 0;
  int64_t step = 0;
  double sigma = 0;
};

/// A second low-rank adapter that an algorithm owns (Bi-LoRA's auxiliary
/// module, which models SAM's perturbation of W by gradient ascent): while
/// `*armed`, a training forward adds scaling * x A^T B^T (on the layer's
/// input, as a change to W would). Not a submodule: no optimizer steps it,
/// no export or state_dict holds it; its owner trains and saves it.
struct AuxiliaryAdapter {
  at::Tensor A, B;  // [r, in] and [out, r], leaves whose gradients the pass fills
  double scaling = 1;
  std::shared_ptr<const bool> armed;
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

  /// Shares `noise` (null: none), this layer being the `layer`-th adapted one.
  void set_weight_noise(std::shared_ptr<const WeightNoise> noise, int64_t layer);

  /// Shares `adapter` (null: none).
  void set_auxiliary_adapter(std::shared_ptr<const AuxiliaryAdapter> adapter) { auxiliary_ = std::move(adapter); }
  const AuxiliaryAdapter* auxiliary_adapter() const { return auxiliary_.get(); }

  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  at::Tensor weight, bias;
  std::shared_ptr<AdapterMatrix> lora_A, lora_B;  // null until attach_lora

 private:
  at::Tensor noisy_base(const at::Tensor& x) const;
  /// The noise's standard deviation for each row of W [out, 1] at its step.
  at::Tensor noise_row_std() const;

  LoraShape lora_;
  bool merged_ = false;
  std::shared_ptr<const WeightNoise> noise_;
  std::shared_ptr<const AuxiliaryAdapter> auxiliary_;
  int64_t noise_layer_ = 0;
  mutable int64_t row_std_step_ = -1;  // the step row_std_ is for: W + s B A is fixed through a step's microbatches
  mutable at::Tensor row_std_;
};

}  // namespace basin
