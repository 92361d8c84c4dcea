#pragma once

#include <string>
#include <vector>

#include "basin/core/config/config.h"

namespace basin {

/// Whether a config may resume a checkpoint made with `saved`: only keys
/// that cannot change the numbers of the run may differ — its length
/// (max_epochs, max_steps), logging (log_every, callbacks.progress),
/// checkpointing (callbacks.checkpoint), threads, init_from (a resumed run
/// takes its weights from the checkpoint), which units recompute, and each
/// parallel mode's keys that change no number
/// (parallel_keys_resume_may_change).
/// `also_safe` adds keys (and sections) to those. Throws ConfigError naming
/// the first other key that differs and both values.
void check_same_run(const Json& saved, const Json& current, const std::vector<std::string>& also_safe = {});

}  // namespace basin
