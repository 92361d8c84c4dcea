#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/config/config.h"
#include "basin/core/engine/engine.h"
#include "basin/core/engine/pass_request.h"
#include "basin/core/engine/state.h"
#include "basin/core/sharding/rows_layout.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace torch::nn { class Module; }

namespace basin {

class Communicator;
class UnitRunner;

/// What a parallel mode ("parallel.mode") does to training, in one object:
/// how replicas start, how the optimizer is wrapped, how each pass's
/// gradients are synced, what a step does after the base step, the
/// checkpoint's per-mode parts, and the whole parameters on demand. The
/// trainer holds one and never asks which mode it is.
///
/// A new mode is a subclass in a folder of its own plus its line in the
/// table of modes.cpp (see docs/library.md, "How a mode is built").
class DistributedStrategy {
 public:
  virtual ~DistributedStrategy();
  DistributedStrategy(const DistributedStrategy&) = delete;
  DistributedStrategy& operator=(const DistributedStrategy&) = delete;

  /// The mode's name as the config spells it.
  const std::string& mode() const { return mode_; }
  /// The ranks trained together; null when this process trains alone.
  const std::shared_ptr<Communicator>& communicator() const { return communicator_; }

  /// After INIT, before AFTER_SHARDING: makes the replicas equal and puts
  /// the mode's optimizer (a wrapper over state.optimizer) in its place.
  /// `units` are the model's declared units (zero3 shards by them). The
  /// strategy keeps `state` to read the optimizer the step runs later.
  virtual void wrap(State& state, const std::vector<torch::nn::Module*>& units,
                    const LocalOptimizerFactory& make_local);
  /// Runs the model's units (zero3 gathers them); null: plain calls.
  virtual UnitRunner* unit_runner() { return nullptr; }
  /// The optimizer's shards (zero1, zero2, zero3); null when every rank
  /// steps every parameter.
  virtual ShardedParameters* shards() { return nullptr; }

  /// Around the backward of a pass's microbatch that syncs (the request is
  /// not kNone): the sync may start inside the backward, from its hooks.
  virtual void prepare_gradient_sync(GradientSync /*sync*/) {}
  virtual void finish_gradient_sync(GradientSync /*sync*/) {}
  /// A synced backward (or its finish) threw: drops what it left.
  virtual void abandon_gradient_sync() {}
  /// Every microbatch's backward syncs, not just the last one's (zero3's
  /// gradients accumulate on the shards, never whole).
  virtual bool syncs_every_microbatch() const { return false; }
  /// After each optimizer step (data-parallel modes: buffers such as
  /// BatchNorm's statistics follow rank 0's, so nothing after the step
  /// depends on the rank).
  virtual void after_step() {}

  /// The mode's own parts of a checkpoint (zero3: this rank's shards).
  virtual std::vector<Engine::CheckpointPart> checkpoint_parts() { return {}; }
  /// Refuses, before loading, a checkpoint of this rank's own whose layout
  /// needs this run's world size (`saved_world_size`: the ranks that wrote it).
  virtual void check_resume(int64_t /*saved_world_size*/) const {}
  /// How this rank's checkpoint holds the parameters when it holds rows of
  /// them (zero3), so a whole checkpoint can be cut to it; none when whole.
  virtual std::optional<RowsLayout> rows_layout() const { return std::nullopt; }
  /// Runs `body` while the model holds whole parameters (collective under zero3).
  virtual void with_whole_parameters(const std::function<void()>& body) { body(); }
  /// Copies of the model's whole parameters, in the model's order (collective under zero3).
  virtual std::vector<at::Tensor> whole_parameters();

 protected:
  DistributedStrategy(std::string mode, std::shared_ptr<Communicator> communicator);
  State& state() const;

 private:
  std::string mode_;
  std::shared_ptr<Communicator> communicator_;
  State* state_ = nullptr;
};

/// The strategy the config's "parallel" section asks for, the only reader
/// of that section:
///
///     "parallel": {"mode": "none",         none, ddp, zero1, zero2, zero3, hsdp
///                  "timeout_seconds": 300, a collective that takes longer fails
///                  "bucket_mb": 25,        data-parallel gradient buckets
///                  "overlap": true,        buckets start from backward's hooks
///                  "mixed_precision": {},  zero3's gathers in bf16 or fp16 (zero3/mixed_precision.h)
///                  "shard_group_size": 8}  hsdp: zero3 within groups this size, replicated across them
///
/// Its "activation_checkpointing" is no mode's concern: the trainer reads
/// it and tells the model, which runs its units, the ones recomputed in
/// backward (core/model/unit_selection.h).
///
/// `given` is a communicator the caller made (the hand loop, tests); without
/// one, a process started by basin-run or torchrun joins its job, and a
/// sharding mode alone gets a one-rank group (one code path). "none" trains
/// one process alone and refuses a communicator of several ranks. `precision`
/// is the run's (mixed-precision gathers must match it).
std::unique_ptr<DistributedStrategy> make_strategy(Params& parallel, std::shared_ptr<Communicator> given, bool cuda,
                                                   Precision precision);

/// The "parallel" keys, as paths ("parallel.prefetch"), that a resume may
/// change, in any mode: "timeout_seconds", and each mode's that change no
/// number (when zero3 gathers and frees), as its line in modes.cpp says.
std::vector<std::string> parallel_keys_resume_may_change();
/// Those a resharded resume may change besides: "mode", and each mode's
/// layout (the buckets and their overlap, hsdp's group size), whose numbers
/// differ from the saved run's as another world size's do.
std::vector<std::string> parallel_keys_reshard_may_change();

}  // namespace basin
