#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "basin/core/state_dict.h"

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

/// Reads and verifies a checkpoint (size and CRC-32 against its .sum, then
/// the pickle). Throws CheckpointError naming the file and what is wrong:
/// missing, no .sum, truncated, corrupted, not a dict.
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
/// file newer than them) and deletes the older ones.
void remove_old_checkpoints(const std::string& dir, int64_t keep);

}  // namespace basin
