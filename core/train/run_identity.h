#pragma once

#include <string>
#include <vector>

#include "basin/core/config/config.h"

namespace basin {

/// Whether a config may resume a checkpoint made with `saved`: only keys
/// that cannot change the numbers of the run may differ — its length
/// (max_epochs, max_steps), logging (log_every, callbacks.progress),
/// checkpointing (callbacks.checkpoint), threads, parallel.timeout_seconds,
/// and init_from (a resumed run takes its weights from the checkpoint).
/// `also_safe` adds keys (and sections) to those. Throws ConfigError naming
/// the first other key that differs and both values.
void check_same_run(const Json& saved, const Json& current, const std::vector<std::string>& also_safe = {});

/// What a resharded resume may change besides: the parallel mode and its
/// data-parallel layout, whose numbers differ from the saved run's only as
/// another world size's do (the order of each sum).
extern const std::vector<std::string> kResharding;

}  // namespace basin
