#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/config/config.h"
#include "basin/core/engine/pass_hooks.h"
#include "basin/core/engine/state.h"

namespace torch::optim { class Optimizer; }

namespace basin {

class ShardedParameters;

/// What the trainer checks around each optimizer step:
///
///     "grad_clip_norm": 0                                       clip the gradients' global norm (0: off)
///     "nonfinite_loss": {"skip": true, "max_consecutive": 10}
///
/// each pass's gradients under a grad scaler (unscaled, every rank
/// agreeing), else its loss on every rank (a non-finite one skips the step
/// when "skip"); a run of "max_consecutive" steps with a non-finite loss
/// stops training (0: never); clipping runs last before the base step, its
/// norm over ZeRO-1 shards when the optimizer is sharded.
class StepChecks {
 public:
  /// Reads the keys above from the config's root.
  explicit StepChecks(Params& root);

  /// The hooks an optimizer step runs around each pass (a SAM step calls
  /// them itself; the trainer calls them around a plain one). `sharded`:
  /// the ZeRO-1 optimizer, or null.
  PassHooks pass_hooks(State& state, ShardedParameters* sharded);

  /// The loss the pass just ran, for the finiteness check without a scaler.
  void record_pass_loss(const at::Tensor& loss) { pass_loss_ = loss; }
  void start_step() { nonfinite_in_step_ = false; }
  bool nonfinite_in_step() const { return nonfinite_in_step_; }
  /// After step `step` (counting from 1): throws std::runtime_error when the
  /// streak of non-finite steps reaches its limit.
  void end_step(int64_t step);
  /// Steps in a row, up to now, whose loss was not finite (checkpoints keep it).
  int64_t nonfinite_streak() const { return nonfinite_streak_; }
  void set_nonfinite_streak(int64_t streak) { nonfinite_streak_ = streak; }

 private:
  bool pass_loss_finite(const State& state);

  double grad_clip_norm_ = 0;
  bool skip_nonfinite_ = true;
  int64_t max_nonfinite_steps_ = 10;
  at::Tensor pass_loss_;
  bool nonfinite_in_step_ = false;
  int64_t nonfinite_streak_ = 0;
};

}  // namespace basin
