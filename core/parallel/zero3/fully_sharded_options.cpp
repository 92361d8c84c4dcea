#include "basin/core/parallel/zero3/fully_sharded_options.h"

#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"

namespace basin {

const std::vector<std::string>& fully_sharded_keys() {
  static const std::vector<std::string> keys = {"prefetch", "reshard_after_forward", "mixed_precision",
                                                "return_freed_memory"};
  return keys;
}

const std::vector<std::string>& fully_sharded_keys_changing_no_number() {
  static const std::vector<std::string> keys = {"prefetch", "reshard_after_forward", "return_freed_memory"};
  return keys;
}

FullyShardedOptions fully_sharded_options_from_config(Params& parallel, bool overlap, Precision precision) {
  FullyShardedOptions options;
  options.overlap = overlap;
  const int64_t ahead = overlap ? 1 : 0;
  Params prefetch = parallel.object("prefetch");
  options.forward_prefetch = prefetch.integer("forward", ahead, 0, 64);
  options.backward_prefetch = prefetch.integer("backward", ahead, 0, 64);
  prefetch.finish();
  options.reshard_after_forward = parallel.boolean("reshard_after_forward", true);
  options.return_freed_memory = parallel.boolean("return_freed_memory", false);
  options.mixed_precision = mixed_precision_from_config(parallel, precision);
  return options;
}

void refuse_fully_sharded_key(const Params& parallel, const std::string& key, const std::string& mode) {
  if (key == "mixed_precision") {
    const Json& section = parallel.raw_object().at(key);
    const Json low = section.is_object() ? section.value("param_dtype", Json("bf16")) : Json("bf16");
    // The precision it suggests exists for bf16 and fp16 only ("amp_fp32" does not).
    const std::string dtype = low == Json("fp16") ? "fp16" : "bf16";
    throw ConfigError("config key '" + parallel.path_of(key) + "': mixed-precision gathers are zero3's (the mode that "
                      "gathers parameters), and this run's mode is \"" + mode + "\"; under it, \"precision\": \"amp_" +
                      dtype + "\" computes in " + dtype + " over the fp32 parameters");
  }
  if (key == "return_freed_memory") {
    throw ConfigError("config key '" + parallel.path_of(key) + "': it is zero3's and hsdp's (the modes whose memory is "
                      "the point), and this run's mode is \"" + mode + "\"");
  }
  throw ConfigError("config key '" + parallel.path_of(key) + "': it schedules zero3's gathers, and this run's "
                    "mode is \"" + mode + "\", which gathers nothing");
}

}  // namespace basin
