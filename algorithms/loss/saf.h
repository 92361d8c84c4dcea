#pragma once

#include <vector>

#include "basin/algorithms/loss/trajectory_loss.h"

namespace basin {

/// SAF (Du et al., NeurIPS 2022): the reference outputs are the model's own
/// outputs on the same samples "epochs_ago" epochs ago, kept per sample.
///
///     {"algorithms": {"saf": {"lambda": 0.3, "temperature": 5, "epochs_ago": 2, "start_epoch": 5}}}
///
/// The defaults are the authors' ImageNet run's. The outputs of each step's
/// first pass (every pass but SAM's descent and ESAM's forward alone: at w,
/// but for momentum_sam, whose one pass runs perturbed) are written, in fp32
/// on the CPU, into a bank of [training samples, epochs_ago + 1, classes]
/// indexed by the samples' global ids (Batch::ids, which the trainer's data
/// provides): one slot per epoch, round robin, so the slot read (epochs_ago
/// back) is never the one this epoch writes. Each row also records the epoch
/// it was written in: a sample that epoch did not visit (the epoch's last
/// partial batch is dropped; the epochs before the first) contributes
/// nothing to the term, where the authors' code reads a stale row or zeros.
/// Under data-parallel training and ZeRO-1 every rank's outputs are gathered
/// after each step (one all-reduce of the batch's ids and outputs; every
/// rank records as many), so every rank holds the whole bank. Bank and
/// epochs are saved in checkpoints. Cost: no extra pass; memory
/// (epochs_ago + 1) x samples x classes floats.
class SAF : public TrajectoryLoss {
 public:
  explicit SAF(Params& params);
  std::string name() const override { return "saf"; }
  bool match(Event event, const State& state) const override;
  void apply(Event event, State& state, Logger& logger) override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  int64_t epochs_ago() const { return epochs_ago_; }
  /// [samples, epochs_ago + 1, classes]; undefined before the first step.
  const at::Tensor& bank() const { return bank_; }

 private:
  void record(const State& state);
  void write_recorded(const State& state);

  int64_t epochs_ago_ = 2;
  at::Tensor bank_;
  at::Tensor written_;  // [samples, epochs_ago + 1]: the epoch each row was written in, -1 never
  std::vector<at::Tensor> recorded_ids_, recorded_outputs_;  // this step's, until AFTER_STEP
};

}  // namespace basin
