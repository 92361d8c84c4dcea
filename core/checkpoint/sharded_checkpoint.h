#pragma once

#include <string>

#include "basin/core/base/state_dict.h"

namespace basin {

/// Joins a sharded (ZeRO-3) checkpoint's rank files (checkpoint_file.h)
/// into one whole dict that Python's `torch.load` opens and `init_from`
/// starts a run from:
///
///     "basin"      {"format", "torch", "world_size", "consolidated_from": manifest path}
///     "timestamp", "config"   the manifest's
///     "model"      every parameter whole (each rank's rows in rank order) and the buffers
///     "optimizer"  PyTorch's layout, each parameter's state whole the same way
///
/// The rules' per-parameter state, the generators and the loop stay in the
/// sharded checkpoint, which is what resumes a run. Throws CheckpointError
/// naming the file that is missing, damaged or does not fit the others.
StateDict consolidate_checkpoint(const std::string& manifest_path);

}  // namespace basin
