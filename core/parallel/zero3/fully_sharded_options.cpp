#include "basin/core/parallel/zero3/fully_sharded_options.h"

#include "basin/core/config/config.h"

namespace basin {

FullyShardedOptions fully_sharded_options_from_config(Params& parallel, const std::string& mode, bool overlap,
                                                       Precision precision) {
  for (const char* key : {"prefetch", "reshard_after_forward"}) {
    if (mode != "zero3" && parallel.has(key)) {
      throw ConfigError("config key '" + parallel.path_of(key) + "': it schedules zero3's gathers, and this run's "
                        "mode is \"" + mode + "\", which gathers nothing");
    }
  }
  FullyShardedOptions options;
  options.overlap = overlap;
  const int64_t ahead = overlap ? 1 : 0;
  Params prefetch = parallel.object("prefetch");
  options.forward_prefetch = prefetch.integer("forward", ahead, 0, 64);
  options.backward_prefetch = prefetch.integer("backward", ahead, 0, 64);
  prefetch.finish();
  options.reshard_after_forward = parallel.boolean("reshard_after_forward", true);
  options.mixed_precision = mixed_precision_from_config(parallel, mode, precision);
  return options;
}

}  // namespace basin
