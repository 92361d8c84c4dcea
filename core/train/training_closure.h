#pragma once

#include <functional>

#include <ATen/core/Tensor.h>

#include "basin/core/engine/pass_request.h"
#include "basin/core/engine/state.h"
#include "basin/core/train/loss.h"

namespace basin {

class Engine;
class Model;

/// The closure the trainer hands the optimizer: one pass, as the state's
/// request asks (its part of the batch, its samples, with or without
/// backward, the mean loss or each sample's), run in microbatches with the
/// per-microbatch events. Each microbatch carries its share of the pass's
/// mean loss, so k microbatches give the gradient of one batch of all their
/// samples. Of token targets ([n, T]) the mean is over the counted tokens
/// (Loss::count) of the whole pass on every rank it averages over, as if
/// the step's batch ran at once on one rank. Under a grad scaler the backward runs on the scaled loss, in
/// every pass. The ranks' gradients are synced once, by the last
/// microbatch's backward, as the request says (GradientSync), through
/// `sync`: so AFTER_BACKWARD sees them synced then, as after PyTorch DDP's
/// backward, and rank-local after the earlier microbatches.
class TrainingClosure {
 public:
  /// `prepare` runs before the backward that syncs (the sync may start
  /// inside it), `finish` right after it; a kNone pass calls neither.
  struct Sync {
    std::function<void(GradientSync)> prepare;
    std::function<void(GradientSync)> finish;
    /// When a synced backward (or its finish) threw: drop what it left.
    std::function<void()> abandon;
    /// Every microbatch's backward syncs (ZeRO-3: gradients accumulate on
    /// the shards, never whole), not just the last one's.
    bool every_microbatch = false;
  };

  TrainingClosure(State& state, Engine& engine, Model& model, Loss loss, int64_t microbatches, Sync sync);

  /// The pass's loss (see PassRequest); zeroes the gradients first when it
  /// backpropagates. Of token targets: this rank's mean over its counted tokens.
  at::Tensor operator()();
  /// The last pass's loss over its samples (detached), for the finiteness check.
  const at::Tensor& pass_loss() const { return pass_loss_; }
  /// Whether the passes measure next-token accuracy (an argmax over the
  /// vocabulary): the trainer asks for it in the pass it logs.
  void measure_accuracy(bool measure) { measure_accuracy_ = measure; }
  /// The last pass's next-token accuracy over its counted tokens on this
  /// rank; NaN unless the targets are tokens and it was measured.
  double pass_accuracy() const { return pass_accuracy_; }

 private:
  /// "loss": "model": the microbatch's loss as the model computes it.
  at::Tensor model_loss();
  /// Token targets: the pass's counted tokens (not ignore_index) per rank
  /// whose gradients it averages (an all-reduce of one number), at least 1;
  /// this rank's alone (`here`) for rank-local gradients and a forward alone.
  double counted_tokens_per_rank(double here) const;

  State& state_;
  Engine& engine_;
  Model& model_;
  Loss loss_;
  int64_t microbatches_;
  Sync sync_;
  at::Tensor pass_loss_;
  bool measure_accuracy_ = true;
  double pass_accuracy_ = 0;
};

}  // namespace basin
