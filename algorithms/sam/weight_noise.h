#pragma once

#include <cstdint>
#include <memory>

#include "basin/core/model/layer_perturbation.h"

namespace basin {

/// The noise of this step, which every adapted layer shares (Flat-LoRA
/// sets it before each pass).
struct WeightNoiseStep {
  bool active = false;  // armed for this step's pass alone
  uint64_t run_seed = 0;
  int64_t step = 0;
  double sigma = 0;
};

/// Flat-LoRA's noise on one adapted layer's frozen weight: while the step's
/// noise is active, row i of W gets N(0, (sigma ||W'_i|| / sqrt(in))^2) with
/// W' = W + scaling B A, drawn row by row from noise_seed(run_seed, step,
/// layer), so that any sharding draws what one process draws. It is
/// regenerated in backward, never kept, and W itself is never changed.
class WeightNoise : public LayerPerturbation {
 public:
  /// For the `layer`-th adapted layer of the model.
  WeightNoise(std::shared_ptr<const WeightNoiseStep> step, int64_t layer) : step_(std::move(step)), layer_(layer) {}

  bool active() const override { return step_->active && step_->sigma > 0; }
  /// x (W + e)^T (+ b); throws std::logic_error for a weight that trains.
  at::Tensor base_output(const AdaptableLinear& layer, const at::Tensor& x) const override;

 private:
  /// The noise's standard deviation for each row of W [out, 1] at its step.
  at::Tensor row_std(const AdaptableLinear& layer) const;

  std::shared_ptr<const WeightNoiseStep> step_;
  int64_t layer_;
  mutable int64_t row_std_step_ = -1;  // the step row_std_ is for: W + s B A is fixed through a step's microbatches
  mutable at::Tensor row_std_;
};

}  // namespace basin
