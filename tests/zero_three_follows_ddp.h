#pragma once

// zero3 against ddp, ranks as threads: the same training, each rank's shards
// ddp's rows. Shared by the zero3 tests of every model.

#include <algorithm>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fully_sharded_of.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin::test {

/// What one rank holds after training: the weights gathered whole, its own
/// shards and its buffers (BatchNorm's statistics, replicated).
struct RankHeld {
  test::Weights whole, shards, buffers;
};

inline std::vector<RankHeld> train_and_hold(int world, const Json& config) {
  std::vector<RankHeld> held(static_cast<std::size_t>(world));
  test::run_ranks(world, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    trainer.fit();
    RankHeld& mine = held[static_cast<std::size_t>(rank)];
    mine.whole = test::weights_of(trainer);
    if (test::fully_sharded_of(trainer) != nullptr) {
      for (const auto& s : test::fully_sharded_of(trainer)->shards()) mine.shards.push_back(s.detach().clone());
    }
    for (const auto& b : trainer.model().buffers()) mine.buffers.push_back(b.detach().clone());
  });
  return held;
}

/// Rank `rank`'s rows of `whole` on `world` ranks, by the layout's formula:
/// c = ceil(d / N) rows each, rank r from row r c (a 0-dim tensor is one row).
inline at::Tensor rows_of_rank(const at::Tensor& whole, int rank, int world) {
  const int64_t d = whole.dim() == 0 ? 1 : whole.size(0), c = (d + world - 1) / world;
  const int64_t start = std::min<int64_t>(d, rank * c), n = std::clamp<int64_t>(d - rank * c, 0, c);
  return whole.reshape({d, -1}).narrow(0, start, n);
}

/// Trains `config` under ddp and under zero3 on `world` ranks: each rank's
/// own shards hold ddp's rows of every weight to 1e-5, its buffers are ddp's
/// (bit-identical on every rank), and the weights gathered whole follow ddp.
/// With `shard_group_size`, under hsdp instead: rank r holds rank r % S's
/// rows of S, bit for bit what the other groups' rank of its place holds.
inline void expect_zero_three_follows_ddp(Json config, const std::string& what, int world = 2,
                                          int shard_group_size = 0) {
  config["parallel"]["mode"] = "ddp";
  config["parallel"].erase("shard_group_size");
  const auto replicated = train_and_hold(world, config);
  config["parallel"]["mode"] = shard_group_size > 0 ? "hsdp" : "zero3";
  if (shard_group_size > 0) config["parallel"]["shard_group_size"] = shard_group_size;
  const int group = shard_group_size > 0 ? shard_group_size : world;
  const auto sharded = train_and_hold(world, config);
  EXPECT_LE(max_difference(sharded[0].whole, replicated[0].whole), 1e-5) << what;
  for (int r = 0; r < world; ++r) {
    const RankHeld& rank = sharded[static_cast<std::size_t>(r)];
    ASSERT_EQ(rank.shards.size(), replicated[0].whole.size()) << what;
    for (std::size_t i = 0; r >= group && i < rank.shards.size(); ++i) {
      EXPECT_TRUE(at::equal(rank.shards[i], sharded[static_cast<std::size_t>(r % group)].shards[i]))
          << what << ": rank " << r << "'s rows of parameter " << i << " against its replica's in the first group";
    }
    for (std::size_t i = 0; i < rank.shards.size(); ++i) {
      const at::Tensor expected = rows_of_rank(replicated[0].whole[i], r % group, group);
      ASSERT_EQ(rank.shards[i].numel(), expected.numel()) << what << ", rank " << r << ", parameter " << i;
      if (expected.numel() == 0) continue;
      EXPECT_LE((rank.shards[i].reshape(expected.sizes()) - expected).abs().max().item<double>(), 1e-5)
          << what << ", rank " << r << "'s rows of parameter " << i;
    }
    EXPECT_EQ(max_difference(rank.buffers, sharded[0].buffers), 0.0) << what << ": rank " << r << "'s buffers";
  }
  EXPECT_LE(max_difference(sharded[0].buffers, replicated[0].buffers), 1e-5) << what << ": buffers";
}

}  // namespace basin::test
