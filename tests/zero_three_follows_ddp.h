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

/// The largest gap of the floating buffers (BatchNorm's statistics, not its counter).
inline double floating_difference(const test::Weights& a, const test::Weights& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].is_floating_point()) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

/// How near two modes' runs end: within 1e-5 in fp32 (sums in other
/// orders); in a low precision, nearer than a run that did not train
/// (`weights` and `buffers`: how far ddp's run moved them from the start).
struct Yardstick {
  bool low_precision = false;
  double weights = 1e-5, buffers = 1e-5;
  void expect(double apart, double bound, const std::string& what) const {
    if (low_precision) {
      EXPECT_LT(apart, bound) << what << ": no nearer than a run that did not train";
    } else {
      EXPECT_LE(apart, bound) << what;
    }
  }
};

inline Yardstick yardstick_of(const Json& config, const RankHeld& trained, bool low_precision) {
  if (!low_precision) return {};
  Json plain = config;
  plain.erase("parallel");
  Trainer untrained(plain);
  test::Weights buffers;
  for (const auto& b : untrained.model().buffers()) buffers.push_back(b.detach().clone());
  return {true, max_difference(trained.whole, untrained.whole_parameters()), floating_difference(trained.buffers, buffers)};
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
/// A `low_precision` run (bf16, fp16 autocast) is no fp32 run: autocast
/// rounds each weight to bf16, so the modes' fp32 sums in other orders can
/// round a weight to another bf16 neighbour, a gap the model's curvature,
/// not a rounding, sizes over steps. Its yardstick is a run that did not
/// train: the weights, rows and buffers nearer ddp's than the start is.
/// (One step is bounded by the rounding itself: local_gradients.h.)
inline void expect_zero_three_follows_ddp(Json config, const std::string& what, int world = 2,
                                          int shard_group_size = 0, bool low_precision = false) {
  config["parallel"]["mode"] = "ddp";
  config["parallel"].erase("shard_group_size");
  const auto replicated = train_and_hold(world, config);
  const Yardstick near = yardstick_of(config, replicated[0], low_precision);
  config["parallel"]["mode"] = shard_group_size > 0 ? "hsdp" : "zero3";
  if (shard_group_size > 0) config["parallel"]["shard_group_size"] = shard_group_size;
  const int group = shard_group_size > 0 ? shard_group_size : world;
  const auto sharded = train_and_hold(world, config);
  near.expect(max_difference(sharded[0].whole, replicated[0].whole), near.weights, what);
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
      near.expect((rank.shards[i].reshape(expected.sizes()) - expected).abs().max().item<double>(), near.weights,
                  what + ", rank " + std::to_string(r) + "'s rows of parameter " + std::to_string(i));
    }
    EXPECT_EQ(max_difference(rank.buffers, sharded[0].buffers), 0.0) << what << ": rank " << r << "'s buffers";
  }
  if (!low_precision) {
    EXPECT_LE(max_difference(sharded[0].buffers, replicated[0].buffers), 1e-5) << what << ": buffers";
  } else if (near.buffers > 0) {  // the counters alike, the statistics nearer than the start
    for (std::size_t i = 0; i < replicated[0].buffers.size(); ++i) {
      if (replicated[0].buffers[i].is_floating_point()) continue;
      EXPECT_TRUE(at::equal(sharded[0].buffers[i], replicated[0].buffers[i])) << what << ": buffer " << i;
    }
    near.expect(floating_difference(sharded[0].buffers, replicated[0].buffers), near.buffers, what + ": buffers");
  }
}

}  // namespace basin::test
