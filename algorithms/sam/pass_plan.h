#pragma once

#include <cstdint>
#include <functional>
#include <unordered_set>

#include <ATen/core/Tensor.h>

namespace basin {

class StepView;

/// What the ascent pass of one SAM step runs on.
struct AscentPlan {
  /// Tensors left at w in this step: they take no gradient in the ascent
  /// (autograd skips that work), stay out of the norm and are not
  /// perturbed. A plan that rests every tensor the loss reaches makes the
  /// step a plain one-pass step.
  std::unordered_set<const c10::TensorImpl*> resting;
  /// The ascent returns each sample's loss (see PassRequest), for `descent_samples`.
  bool per_sample_losses = false;
};

/// The second, optional contract of a SAM variant (ESAM): what its passes
/// run on, beyond the whole batch. A rule that is also a PassPlan is asked
/// on each SAM step (not the plain steps between): `ascent` before the
/// ascent pass, `descent_samples` before the descent when the step
/// descends. mSAM's parts are a setting of the step (SAMOptions).
class PassPlan {
 public:
  virtual ~PassPlan() = default;
  /// Before the ascent of step `index` (every step counted from 0).
  virtual AscentPlan ascent(StepView& step, int64_t index) = 0;
  /// At w + e, before the descent: the samples (int64 indices into the
  /// batch, on the CPU, in order) the descent runs on; undefined for all.
  /// `ascent_losses` are each sample's ascent loss when the plan asked for
  /// them; `closure` serves step.forward_at_current_weights.
  virtual at::Tensor descent_samples(StepView& step, const at::Tensor& ascent_losses,
                                     const std::function<at::Tensor()>& closure) = 0;
};

}  // namespace basin
