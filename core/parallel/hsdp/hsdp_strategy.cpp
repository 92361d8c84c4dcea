#include "basin/core/parallel/hsdp/hsdp_strategy.h"

#include <utility>

#include "basin/core/communication/communicator.h"
#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/parallel/zero3/fully_sharded_options.h"

namespace basin {

namespace {
const char* const kKey = "shard_group_size";
}

HsdpStrategy::HsdpStrategy(const std::shared_ptr<Communicator>& job, int64_t shard_group_size,
                           FullyShardedOptions options)
    : HsdpStrategy(job, split(*job, shard_group_size), std::move(options)) {}

HsdpStrategy::HsdpStrategy(const std::shared_ptr<Communicator>& job, Groups groups, FullyShardedOptions options)
    : Zero3Strategy("hsdp", job, std::move(groups.shards), std::move(groups.replicas), std::move(options)) {}

HsdpStrategy::Groups HsdpStrategy::split(Communicator& job, int64_t shard_group_size) {
  const int world = job.world_size();
  if (world % shard_group_size != 0) {
    throw ConfigError("config key 'parallel.shard_group_size': " + std::to_string(shard_group_size) +
                      " does not divide the job's " + std::to_string(world) +
                      " ranks; hsdp shards within groups of that many ranks (usually a node's) and replicates "
                      "across the groups, so it must divide the job's ranks");
  }
  const auto size = static_cast<int>(shard_group_size);
  std::vector<int> shard_of(static_cast<std::size_t>(world)), place_in(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    shard_of[static_cast<std::size_t>(r)] = r / size;  // consecutive ranks: a node's
    place_in[static_cast<std::size_t>(r)] = r % size;  // one from each group, holding the same rows
  }
  Groups groups;
  groups.shards = job.split(shard_of);
  groups.replicas = job.split(place_in);
  return groups;
}

const std::vector<std::string>& HsdpStrategy::option_keys() {
  static const std::vector<std::string> keys = {kKey};
  return keys;
}

int64_t HsdpStrategy::shard_group_size_from_config(Params& parallel) {
  if (!parallel.has(kKey)) {
    throw ConfigError("config key 'parallel.shard_group_size' is missing: hsdp shards each parameter within groups "
                      "of that many consecutive ranks (usually a node's, e.g. 8) and replicates across the groups");
  }
  return parallel.integer(kKey, 1, 1, 1 << 20);
}

void HsdpStrategy::refuse_key(const Params& parallel, const std::string& key, const std::string& mode) {
  if (key != kKey) refuse_fully_sharded_key(parallel, key, mode);
  throw ConfigError("config key '" + parallel.path_of(key) + "': it sizes hsdp's shard groups, and this run's mode is \"" +
                    mode + "\"" + (mode == "zero3" ? " (which shards over every rank); set \"mode\": \"hsdp\" to "
                                                     "shard within groups and replicate across them"
                                                   : ""));
}

}  // namespace basin
