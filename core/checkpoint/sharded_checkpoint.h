#pragma once

#include <string>

#include "basin/core/base/state_dict.h"
#include "basin/core/sharding/rows_layout.h"

namespace basin {

/// zero3's rows layout of a checkpoint, both ways: a sharded checkpoint's
/// rank files joined into one whole checkpoint, and a whole checkpoint cut
/// into one rank's file at any world size. With the two, a checkpoint of
/// any mode at any world size resumes under any mode at any other
/// (Trainer::resume, ResumeOptions::reshard).
///
/// Per-parameter state is numbered as the optimizer numbers its parameters
/// (optimizer_state.h): "optimizer.state" and each rule's
/// "algorithms.<name>.parameters" map an index to {key: value}. A tensor
/// value of more than 0 dimensions (any value of a 0-dimensional
/// parameter's) is per element and has the parameter's rows; anything else
/// (a step count) is the same on every rank.

/// Joins a sharded (ZeRO-3) checkpoint's rank files (checkpoint_file.h)
/// into one whole checkpoint (checkpoint.h's layout) that Python's
/// `torch.load` opens, `init_from` starts a run from, and any mode at any
/// world size resumes:
///
///     "basin"      {"format", "torch", "world_size", "consolidated_from": manifest path}
///     "model"      every parameter whole (each rank's rows in rank order) and the buffers
///     "optimizer"  PyTorch's layout, each parameter's state whole the same way
///     "algorithms" each rule's per-parameter state whole the same way
///     "rng"        every rank's own generators, in rank order
///     the rest     rank 0's: timestamp, schedulers, callbacks, loop, config
///
/// Throws CheckpointError naming the file that is missing, damaged or does
/// not fit the others. The rank files are read a tensor at a time
/// (join_rank_files), so the whole it hands back is all it holds.
StateDict consolidate_checkpoint(const std::string& manifest_path);

/// `layout.rank`'s part of a whole checkpoint (of any mode and world size), as
/// that rank's own file of a sharded checkpoint: "model" the buffers, "shards"
/// its rows of every parameter, the optimizer's and the rules'
/// per-parameter state cut the same way, "basin" its "rank" (and
/// "resharded_from": the world size that saved it). Throws CheckpointError
/// naming a parameter the checkpoint lacks or holds in another shape.
StateDict cut_checkpoint(const StateDict& whole, const RowsLayout& layout);
/// The same of a checkpoint as read_checkpoint_file gave it, never written
/// to: each tensor's pages are handed back once its rows are copied, so a
/// rank holds its rows of the file and no more (release_mapped_pages).
StateDict cut_checkpoint_as_read(const StateDict& whole, const RowsLayout& layout);

}  // namespace basin
