#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace basin {

class Communicator;

/// The state's loss-scaling slot: what the trainer and SAM call around every
/// pass of a step, whichever callback fills it (callbacks/grad_scaler).
///   - `scale(loss)` before every backward, in every pass and microbatch;
///   - `unscale_and_check(grads)` after every pass, agreed by all ranks;
///   - `step_found_inf()` then `update()` once per optimizer step.
class LossScaler {
 public:
  virtual ~LossScaler() = default;

  /// loss * scale (the loss itself when scaling is off).
  virtual at::Tensor scale(const at::Tensor& loss) = 0;
  /// Unscales `grads` in place and reports whether they are finite on every
  /// rank of `communicator` (null: this process only).
  virtual bool unscale_and_check(const std::vector<at::Tensor>& grads, Communicator* communicator) = 0;
  /// Whether any pass of the step in progress overflowed (reset by update()).
  virtual bool step_found_inf() const = 0;
  /// The once-per-step scale update, from the verdicts of all its passes.
  virtual void update() = 0;
  virtual double current_scale() const = 0;
};

}  // namespace basin
