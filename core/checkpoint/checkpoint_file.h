#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "basin/core/base/state_dict.h"
#include "basin/core/sharding/rows_layout.h"

namespace basin {

/// Checkpoint files. A checkpoint is two files in one folder:
///   step-<step, 12 digits>.pt      the dict, in LibTorch's pickle format (torch.load opens it)
///   step-<step, 12 digits>.pt.sum  {"bytes": N, "crc32": "<hex>"}, written last
/// A .pt without its .sum is an unfinished write and never loaded.

/// "step-000000000123.pt"
std::string checkpoint_file_name(int64_t step);

/// Writes `checkpoint` to `path` safely: each file goes to a temporary name,
/// is fsynced and renamed into place, the folder is fsynced, so a crash at
/// any moment leaves either the old checkpoint or the new one. A failure (no
/// space, no permission) removes the temporary files, leaves every earlier
/// checkpoint untouched and throws CheckpointError naming the file and the
/// system's reason.
void write_checkpoint_file(const std::string& path, const StateDict& checkpoint);

/// Reads and verifies a checkpoint (size and CRC-32 against its .sum, read
/// a chunk at a time, then the pickle). Throws CheckpointError naming the
/// file and what is wrong: missing, no .sum, truncated, corrupted, not a dict.
///
/// The file is mapped copy-on-write and its tensors view the mapping
/// (safe_pickle_load), so reading it holds none of their bytes: a page
/// comes in when its tensor is read, and a write stays in the process.
StateDict read_checkpoint_file(const std::string& path);

/// The dict in a checkpoint's bytes (after their checksum passed); throws
/// CheckpointError naming `name` when they are not a LibTorch pickle of a dict.
StateDict parse_checkpoint_bytes(const std::vector<char>& bytes, const std::string& name);

/// The checkpoint files (step-*.pt, finished or not) in `dir`, newest step first.
std::vector<std::string> list_checkpoint_files(const std::string& dir);

/// The newest checkpoint in `dir` that reads back intact.
struct LatestCheckpoint {
  std::string path;
  StateDict checkpoint = new_state_dict();
  /// Newer files that did not read back, each with the reason.
  std::vector<std::string> rejected;
};
/// Throws CheckpointError when `dir` holds none that reads back (naming why each failed).
LatestCheckpoint read_latest_checkpoint(const std::string& dir);

/// Keeps the newest `keep` finished checkpoints in `dir` (and any unfinished
/// file newer than them) and deletes the older ones (a sharded one's rank
/// files with it).
void remove_old_checkpoints(const std::string& dir, int64_t keep);
/// Deletes rank files (and sums) of steps before the newest manifest that
/// have no manifest: a sharded checkpoint a job died writing. Called by
/// remove_old_checkpoints.
void remove_orphaned_rank_files(const std::string& dir);

/// Sharded checkpoints (ZeRO-3): each rank writes its own whole checkpoint
/// (core/checkpoint/checkpoint.h) as step-<step>.rank-<rank>.pt, then rank 0 writes
/// step-<step>.pt, the manifest, last: the run's timestamp, config and loop
/// and, under "basin", "sharded": {"layout": "rows", "files": [each rank's
/// file name]}. So a manifest exists only once every rank's file does, and
/// read_latest_checkpoint skips one whose rank files are missing or damaged.
std::string rank_file_name(int64_t step, int rank);
/// The manifest for rank 0's capture of a `world_size`-rank checkpoint at `step`.
StateDict sharded_manifest(const StateDict& rank_zero, int64_t step, int world_size);
bool is_sharded_checkpoint(const StateDict& checkpoint);
/// The number of ranks that wrote `checkpoint` ("basin.world_size"; a rank's
/// cut of it at another size says "basin.resharded_from"); 1 for a
/// checkpoint without the entry (one process wrote those).
int64_t saved_world_size(const StateDict& checkpoint);
/// Paths of a manifest's rank files, beside it, in rank order.
std::vector<std::string> rank_files(const std::string& manifest_path, const StateDict& manifest);
/// The ranks a manifest's rows are cut among ("basin.sharded.group_size"):
/// its files' count, but under HSDP, where each group of that many
/// consecutive files holds every row.
int64_t rows_group_size(const std::string& manifest_path, const StateDict& manifest);
/// The ranks one rank's file of a sharded checkpoint cuts its rows among
/// ("shards.group_size"; `otherwise` for a file written before HSDP, whose
/// rows were cut among every rank).
int64_t rank_file_group_size(const StateDict& rank_file, int64_t otherwise);
/// Refuses one rank's file whose rows were cut among another number of
/// ranks than `layout`'s (hsdp's groups of another size, at the same world
/// size): it resumes from its manifest with resharding.
void check_rank_file_rows(const StateDict& rank_file, const RowsLayout& layout);
/// What a rank of a `world_size`-rank job resumes from, given `checkpoint`
/// as read_checkpoint_file read it from `path` (and nobody wrote to it).
/// `rows`: the rows this rank holds when the run is sharded (zero3's
/// Zero3Strategy::rows_layout), else nothing.
///  - A sharded run takes its own rows and nothing more: its own file of a
///    manifest of its world size and rows layout; its rows of a whole checkpoint
///    (cut_checkpoint_as_read); its rows of a manifest of another size,
///    read from the rank files that hold them (reshard_rank_files), which
///    takes `reshard`.
///  - Any other run takes a whole checkpoint as it is, and a manifest's
///    rank files joined (consolidate_checkpoint), which takes `reshard` at
///    another world size.
/// Without `reshard`, a manifest of another world size, or (for a sharded
/// run) another rows layout, is refused, naming both sizes.
StateDict checkpoint_for_rank(const std::string& path, const StateDict& checkpoint, int world_size,
                              const std::optional<RowsLayout>& rows, bool reshard);

}  // namespace basin
