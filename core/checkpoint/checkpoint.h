#pragma once

#include <cstdint>

#include "basin/core/base/checkpoint_error.h"
#include "basin/core/base/state_dict.h"

namespace basin {

class Engine;
struct State;

/// Version of the layout below; a checkpoint of another version is refused.
inline constexpr int64_t kCheckpointFormat = 1;

/// Everything the next step depends on, as one dict that Python's
/// `torch.load` opens:
///
///     "basin"       {"format": 1, "torch": "<version>", "world_size": N}
///     "timestamp"   {"epoch", "step", "batch_in_epoch", "samples"}
///     "model"       {name: tensor}: parameters and buffers, PyTorch's names
///     "optimizer"   PyTorch's optimizer layout (optimizer_state.h)
///     "schedulers"  [each scheduler's state_dict()]
///     "algorithms"  {name: state_dict()}, "callbacks" likewise
///     "rng"         [per rank: {"cpu": generator state[, "cuda": ...]}]
///     and one entry per part the loop added (the trainer's "loop", "config")
///
/// Tensors are on the CPU. Collective: every rank calls it at the same point
/// of the loop (ZeRO-1 gathers the optimizer's shards, every rank's
/// generators are gathered); rank 0's result is the complete one.
///
/// Where ranks hold rows of parameters (zero3: saves_rank_files) each rank's result is its own
/// and complete for it: "model" holds the buffers, the trainer's "shards"
/// part this rank's rows of every parameter, "optimizer" and the rules'
/// per-parameter state those of its shards, and "basin" its "rank". The
/// checkpoint callback writes one file per rank and a manifest
/// (checkpoint_file.h); basin-consolidate joins them into one whole dict.
StateDict capture_checkpoint(Engine& engine);

/// Whether each rank saves, and resumes from, a checkpoint file of its own:
/// it holds only its rows of some of the model's parameters (their
/// placement, as State::shards gives it).
bool saves_rank_files(const State& state);

/// Restores a captured dict into a run built the same way, between
/// BEFORE_LOAD and AFTER_LOAD. Every rank calls it with the same dict.
/// Throws CheckpointError naming the first part that does not fit.
void restore_checkpoint(Engine& engine, const StateDict& checkpoint);

}  // namespace basin
