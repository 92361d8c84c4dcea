#pragma once

#include <memory>
#include <string>
#include <vector>

#include "basin/core/parallel/zero3/zero3_strategy.h"

namespace basin {

class Params;

/// "hsdp": zero3 within each group of `shard_group_size` consecutive ranks
/// (a node's, so the gathers stay on its fast links), the groups replicas
/// of each other: each unit's reduce-scattered gradient rows are summed
/// across the groups too (one all-reduce among the ranks that hold the same
/// rows), so every shard's gradient is the mean over the whole job and the
/// groups step alike. As FSDP2's HSDP (a 2-D mesh: replicate x shard):
/// rank r is rank r % S of shard group r / S.
///
/// The data, the loss, the replicas' start and the grad scaler's vote are
/// the job's; the sums over the shards (SAM's gradient norm, clipping's, the
/// rules' flags) run within a group, where each row is counted once. Every rank
/// writes its checkpoint file (its rows, and its own random streams); the
/// manifest says the rows are cut among S ranks, so resharding reads one
/// group's files and resumes zero3 or hsdp at any size.
class HsdpStrategy : public Zero3Strategy {
 public:
  HsdpStrategy(const std::shared_ptr<Communicator>& job, int64_t shard_group_size, FullyShardedOptions options);

  /// "shard_group_size", the mode's own key.
  static const std::vector<std::string>& option_keys();
  /// Reads it: the ranks of a shard group.
  static int64_t shard_group_size_from_config(Params& parallel);
  /// The ConfigError for it under `mode`.
  [[noreturn]] static void refuse_key(const Params& parallel, const std::string& key, const std::string& mode);

 private:
  struct Groups {
    std::shared_ptr<Communicator> shards, replicas;
  };
  static Groups split(Communicator& job, int64_t shard_group_size);
  HsdpStrategy(const std::shared_ptr<Communicator>& job, Groups groups, FullyShardedOptions options);
};

}  // namespace basin
