#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "basin/core/parallel/zero3/mixed_precision.h"

namespace basin {

/// How zero3 schedules its gathers, as FSDP2's controls do:
///
///     "parallel": {"mode": "zero3",
///                  "overlap": true,                 reduce-scatters start from backward's hooks
///                  "prefetch": {"forward": 1,       units gathered ahead while one computes
///                               "backward": 1},     (0: each gathered when it runs; with overlap false, 0)
///                  "reshard_after_forward": true,   false: a unit stays whole from its forward to its
///                                                   backward (no second gather; every unit whole at once)
///                  "mixed_precision": {...}}        mixed_precision.h
struct FullyShardedOptions {
  bool overlap = true;
  int64_t forward_prefetch = 1;
  int64_t backward_prefetch = 1;
  bool reshard_after_forward = true;
  bool return_freed_memory = false;  // before each backward (core/base/memory_reuse.h)
  MixedPrecisionPolicy mixed_precision;
};

/// zero3's own keys of the "parallel" section ("overlap" is every mode's).
const std::vector<std::string>& fully_sharded_keys();
/// Of those, the ones that change no number (when units are gathered,
/// freed and handed back: their tests pin the same bits either way), which a
/// resume may change.
const std::vector<std::string>& fully_sharded_keys_changing_no_number();
/// Reads them; `overlap` is the section's.
FullyShardedOptions fully_sharded_options_from_config(Params& parallel, bool overlap, Precision precision);
/// The ConfigError for `key`, one of them, given under `mode`, which gathers nothing.
[[noreturn]] void refuse_fully_sharded_key(const Params& parallel, const std::string& key, const std::string& mode);

}  // namespace basin
