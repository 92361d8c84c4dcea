#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/engine/callback.h"
#include "basin/core/optim/loss_scaler.h"

namespace basin {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
  /// ATen's fused kernels where this LibTorch has them for the gradients'
  /// device (CUDA; CPU from 2.3), else the same arithmetic in portable ops.
  bool fused = true;
};

/// Dynamic loss scaling that understands closures and multi-pass steps.
///
/// Installed as the "grad_scaler" callback (automatically under amp_fp16),
/// it fills the state's scaler slot; the trainer and SAM then call it:
///   - `scale(loss)` before every backward, in every pass and microbatch;
///   - `unscale_and_check(grads)` after every pass: gradients are divided by
///     the scale in place and checked for inf/NaN, and the verdict is agreed
///     by all ranks (an all-reduce of one number), so every rank takes the
///     same branch;
///   - `update()` once per optimizer step, from the verdicts of all its
///     passes: backoff after an overflow, growth after `growth_interval`
///     clean steps, never grown to inf.
/// It uses ATen's fused kernels where LibTorch has them (CUDA; CPU from 2.3),
/// else the same arithmetic in portable ops.
class GradScaler : public Callback, public LossScaler, public std::enable_shared_from_this<GradScaler> {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  explicit GradScaler(Params& params);

  std::string name() const override { return "grad_scaler"; }
  void install(State& state) override;
  bool on_batch_end(const State& state, Logger& logger) override;

  bool enabled() const { return options_.enabled; }
  /// loss * scale; the loss itself when disabled.
  at::Tensor scale(const at::Tensor& loss) override;
  /// Unscales `grads` in place and reports whether they are finite on every
  /// rank of `communicator` (null: this process only). Always true when disabled.
  bool unscale_and_check(const std::vector<at::Tensor>& grads, Communicator* communicator) override;
  /// Whether any pass of the step in progress overflowed (reset by update()).
  bool step_found_inf() const override;
  /// The once-per-step scale update.
  void update() override;

  double current_scale() const override;
  int64_t growth_tracker() const;
  const GradScalerOptions& options() const { return options_; }

  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  void to_device(const at::Device& device);

  GradScalerOptions options_;
  at::Tensor scale_;           // float32 [1]
  at::Tensor growth_tracker_;  // int32 [1]
  at::Tensor found_inf_;       // float32 [1]: 1 when a pass of this step overflowed
};

}  // namespace basin
