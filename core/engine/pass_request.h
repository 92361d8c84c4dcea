#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "basin/core/data/batch.h"

namespace basin {

/// Where the gradients of a pass are averaged over ranks (data-parallel
/// training; one process ignores it). The closure's owner (the trainer)
/// honours it once the pass's backward is done.
enum class GradientSync {
  /// Where the optimizer steps them: every gradient on every rank (DDP),
  /// each on the rank that owns it (ZeRO-1).
  kWhereStepped,
  /// Averaged over ranks for every parameter (SAM's synced ascent): whole
  /// on every rank under ddp and ZeRO-1; otherwise placed as a synced
  /// gradient is (ParameterPlacement::gradient: ZeRO-2's on its owner).
  kEverywhere,
  /// Rank-local (SAM's rank-local ascent, a NoGradientSync scope).
  kNone,
};

/// What one pass of a closure runs on, returns and syncs, as the optimizer that
/// calls it asks (SAMOptimizer::request(); the trainer's closure reads
/// State::request, which the SAM algorithm keeps equal to it):
///   - part `part` of `parts` equal contiguous parts of the step's batch
///     (mSAM perturbs each part apart);
///   - of that part, the samples at `samples` (int64 indices on the CPU, in
///     order; ESAM's descent on the samples whose loss rose most), or all of
///     them when undefined; the pass's loss is their mean;
///   - `backward` false: a forward alone, no gradient touched (not zeroed);
///   - `per_sample_losses`: the closure returns each sample's loss, a [n]
///     tensor in the samples' order, instead of their mean (of token
///     targets, each sequence's token sum times n over the pass's counted
///     tokens: its share of the token mean, their mean that mean).
/// A closure that only ever sees the default (the whole batch, backward,
/// the mean) may ignore it; the algorithms that need more say so.
struct PassRequest {
  int64_t part = 0;
  int64_t parts = 1;
  at::Tensor samples;
  bool backward = true;
  bool per_sample_losses = false;
  GradientSync sync = GradientSync::kWhereStepped;
  /// The backward runs on the loss times this (the pass's reported loss is
  /// the loss itself): RWP's mixed form weights its clean and its perturbed
  /// ranks so that the average over ranks is their mix.
  double loss_weight = 1;

  bool whole_batch() const { return parts == 1 && !samples.defined(); }
};

/// The samples of `batch` that `request` asks for, in order (the batch
/// itself for the default): what a closure runs on.
Batch requested_samples(const Batch& batch, const PassRequest& request);

}  // namespace basin
