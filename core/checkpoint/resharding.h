#pragma once

#include <string>

#include "basin/core/base/state_dict.h"
#include "basin/core/sharding/rows_layout.h"

namespace basin {

/// `layout.rank`'s own file at `layout` (as cut_checkpoint makes it from a
/// whole checkpoint) of the sharded checkpoint `manifest` at
/// `manifest_path`, saved at any world size, read from its rank files
/// without joining them: each tensor of the result (a parameter's rows, its
/// optimizer state's, a rule's buffers') is copied from the rows of the
/// files that hold them, and those pages are handed back before the next.
/// The rank files are mapped (read_checkpoint_file), so a rank never holds
/// more than its own rows plus the pages of one tensor being copied.
///
/// The result equals cut_checkpoint(consolidate_checkpoint(manifest_path),
/// layout) but for "basin": the rank, the world size and "resharded_from"
/// (the world size that saved it); and a 0-dimensional tensor of state is
/// a count here, kept as it is, also for a 0-dimensional parameter. Throws
/// CheckpointError naming the rank file that is missing, damaged or not
/// that rank's, or the parameter the model and the checkpoint do not share
/// or whose rows do not fit.
StateDict reshard_rank_files(const std::string& manifest_path, const StateDict& manifest, const RowsLayout& layout);

/// The same at one rank of `world_size` = 1 holding every row, each tensor
/// its parameter's whole shape, in the rank files' order of parameters:
/// the whole checkpoint consolidate_checkpoint hands back.
StateDict join_rank_files(const std::string& manifest_path, const StateDict& manifest);

}  // namespace basin
