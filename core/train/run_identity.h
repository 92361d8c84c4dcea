#pragma once

#include "basin/core/config/config.h"

namespace basin {

/// Whether a config may resume a checkpoint made with `saved`: only keys
/// that cannot change the numbers of the run may differ — its length
/// (max_epochs, max_steps), logging (log_every, callbacks.progress),
/// checkpointing (callbacks.checkpoint), threads, parallel.timeout_seconds,
/// and init_from (a resumed run takes its weights from the checkpoint).
/// Throws ConfigError naming the first other key that differs and both values.
void check_same_run(const Json& saved, const Json& current);

}  // namespace basin
