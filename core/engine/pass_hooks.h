#pragma once

#include <functional>

#include "basin/core/engine/state.h"

namespace basin {

/// Code that runs around each pass of an optimizer step: the trainer sets
/// the state's pass, SAM freezes BatchNorm statistics during its descent, a
/// grad scaler unscales and checks gradients, gradient clipping runs last.
/// Every member is optional.
struct PassHooks {
  std::function<void(Pass)> before_pass;
  std::function<void(Pass)> after_pass;
  /// After the pass's closure: false means the gradients are not finite and
  /// the step must be skipped (weights restored, no base step).
  std::function<bool(Pass)> gradients_finite;
  /// Right before the base optimizer steps, gradients final (clipping).
  std::function<void()> before_base_step;
};

/// An optimizer whose step runs the closure itself, once or more (SAM), and
/// so must call the hooks itself. The trainer drives every other optimizer's
/// passes and hooks on its own.
class PassAwareOptimizer {
 public:
  virtual ~PassAwareOptimizer() = default;
  /// Hooks run in the order added (after_pass in reverse); a step is skipped
  /// when any gradients_finite says false, each of them having been called.
  virtual void add_pass_hooks(PassHooks hooks) = 0;
};

}  // namespace basin
