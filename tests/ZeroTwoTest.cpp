// ZeRO-2 (gradients sharded too), ranks as threads: the same training as
// data parallel for the optimizers and the whole SAM family, with a
// rank-local and a synced ascent, under the grad scaler, bf16, microbatches
// and clipping; and what each rank holds after backward.

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/engine/callback.h"
#include "basin/core/parallel/zero/sharded_optimizer.h"
#include "distributed_util.h"
#include "local_gradients.h"
#include "test_util.h"
#include "zero_three_follows_ddp.h"

namespace basin {
namespace {

using test::InjectOverflowInBackward;
using test::max_difference;
using test::sam_config;
using test::train_on_ranks;

/// Trains `config` under ddp and under zero2 on two ranks: zero2 follows
/// ddp to 1e-5 and its ranks stay bit-identical. `low_precision` (under
/// autocast, where no rounding bounds the gap over steps; see
/// zero_three_follows_ddp.h): nearer ddp's weights than the start is.
void expect_zero_two_follows_ddp(Json config, const std::string& what,
                                 const std::function<void(int, Trainer&)>& setup = nullptr, bool low_precision = false) {
  config["parallel"]["mode"] = "ddp";
  const auto replicated = train_on_ranks(2, config, setup);
  config["parallel"]["mode"] = "zero2";
  const auto sharded = train_on_ranks(2, config, setup);
  test::RankHeld trained;
  trained.whole = replicated[0];
  const test::Yardstick near = test::yardstick_of(config, trained, low_precision);
  near.expect(max_difference(sharded[0], replicated[0]), near.weights, what);
  EXPECT_EQ(max_difference(sharded[0], sharded[1]), 0.0) << what;
  EXPECT_EQ(max_difference(replicated[0], replicated[1]), 0.0) << what;
}

Json two_groups(const std::string& optimizer) {
  return Json::parse(R"({"name": ")" + optimizer + R"(", "lr": 0.1, "momentum": 0.9,
                         "param_groups": [{"params": "bias", "lr": 0.02}]})");
}

TEST(ZeroTwoTest, SgdAndAdamWithAndWithoutSamEqualDataParallel) {
  for (const std::string optimizer : {"sgd", "adam"}) {
    for (const std::string sam : {"", R"({"rho": 0.05, "sync_ascent": false})", R"({"rho": 0.05, "sync_ascent": true})"}) {
      Json config = sam_config(sam.empty() ? "{}" : sam, "ddp");
      if (sam.empty()) config["algorithms"] = Json::object();
      config["optimizer"] = two_groups(optimizer);
      if (optimizer == "adam") config["optimizer"].erase("momentum"), config["optimizer"]["lr"] = 0.01;
      config["schedulers"] = Json::parse(R"([{"name": "linear_warmup", "warmup": 3}])");
      expect_zero_two_follows_ddp(config, optimizer + " " + (sam.empty() ? "without sam" : sam));
    }
  }
}

// Every SAM-family algorithm, with a synced ascent and (where it accepts
// one) a rank-local one, every parameter perturbed or the weights alone.
class VariantZeroTwoTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

bool needs_synced_ascent(const std::string& name) {
  for (const char* synced : {"gsam", "wsam", "friendly_sam", "vasso", "looksam", "ae_sam"}) {
    if (name == synced) return true;
  }
  return false;
}

TEST_P(VariantZeroTwoTest, ZeroTwoEqualsDataParallel) {
  const std::string name = GetParam().first;
  Json config = sam_config("{}", "ddp");
  config["algorithms"] = Json::object();
  config["algorithms"][name] = Json::parse(GetParam().second);
  config["optimizer"] = two_groups("sgd");
  for (const bool synced : {true, false}) {
    if (!synced && needs_synced_ascent(name)) continue;
    for (const char* perturb : {"", "weight"}) {
      config["algorithms"][name]["sync_ascent"] = synced;
      config["algorithms"][name]["perturb"] = perturb;
      expect_zero_two_follows_ddp(config, name + (synced ? " synced" : " rank-local") + " perturb " + perturb);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantZeroTwoTest, ::testing::ValuesIn(test::sam_family()),
                         [](const auto& info) { return info.param.first; });

// The grad scaler's verdict covers every shard: an inf in one rank's
// gradient (its last tensor, whichever rank owns it) skips the step on both ranks.
TEST(ZeroTwoTest, AnOverflowInOneShardSkipsTheStepOnEveryRankAsUnderDataParallel) {
  for (const std::string sync : {"true", "false"}) {
    for (const Pass pass : {Pass::kAscent, Pass::kDescent}) {
      if (sync == "false" && pass == Pass::kAscent) continue;  // a rank-local ascent checks no other rank
      Json config = sam_config(R"({"rho": 0.05, "sync_ascent": )" + sync + "}", "ddp");
      config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 256}})");
      std::vector<int64_t> skipped(2, -1);
      auto inject_on_rank_one = [&](int rank, Trainer& trainer) {
        if (rank == 1) trainer.engine().add_algorithm(std::make_shared<InjectOverflowInBackward>(2, pass, true));
      };
      expect_zero_two_follows_ddp(config, "sync_ascent " + sync, inject_on_rank_one);
      config["parallel"]["mode"] = "zero2";
      test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
        Trainer trainer(config, {}, {}, communicator);
        inject_on_rank_one(rank, trainer);
        skipped[static_cast<std::size_t>(rank)] = trainer.fit().skipped_steps;
      });
      EXPECT_EQ(skipped, (std::vector<int64_t>{1, 1})) << "sync_ascent " << sync;
    }
  }
}

// ESAM at a beta this small rests every tensor in most steps: the base then
// steps with the ascent's gradients, which must sync as a descent's would
// (a rank-local ascent's would let the replicas drift apart).
TEST(ZeroTwoTest, EsamStepsWhoseTensorsAllRestSyncTheirGradients) {
  Json config = sam_config("{}", "ddp");
  config["algorithms"] = Json::parse(R"({"esam": {"beta": 0.01, "gamma": 1.0, "sync_ascent": false}})");
  expect_zero_two_follows_ddp(config, "esam, beta 0.01, rank-local ascent");
}

// Under bf16 autocast: one step (no SAM) as ddp's up to the fp32 sums of
// the same local gradients in other orders (local_gradients.h: 2 ranks' 2
// microbatches, 4 terms, and the clip); SAM's 5 steps nearer ddp's than the start.
TEST(ZeroTwoTest, Bf16MicrobatchesAndClippingEqualDataParallel) {
  for (const std::string sam : {R"({"rho": 0.05, "sync_ascent": true})", R"({"rho": 0.05, "sync_ascent": false})"}) {
    Json config = sam_config(sam, "ddp");
    config["precision"] = "amp_bf16";
    config["data"]["microbatches"] = 2;
    config["grad_clip_norm"] = 0.05;  // below the gradients' norm: every step clips
    config["optimizer"] = two_groups("sgd");
    expect_zero_two_follows_ddp(config, "bf16, microbatches, clipping, " + sam, nullptr, true);
  }
  Json config = sam_config("{}", "ddp");
  config["precision"] = "amp_bf16";
  config["data"]["microbatches"] = 2;
  config["grad_clip_norm"] = 0.05;
  test::expect_one_step_follows_ddp(config, "zero2", 2);
}

/// The bytes of gradients each rank holds after every synced backward.
class GradientBytesAfterBackward : public Callback {
 public:
  std::string name() const override { return "gradient_bytes"; }
  bool on_after_backward(const State& state, Logger&) override {
    int64_t bytes = 0;
    for (const auto& p : state.model->parameters()) {
      if (p.grad().defined()) bytes += p.grad().numel() * static_cast<int64_t>(p.grad().element_size());
    }
    held.push_back(bytes);
    return false;
  }
  std::vector<int64_t> held;
};

// After backward a zero2 rank holds the gradients it owns and nothing else
// (BucketReducerTest pins what the buckets keep): its share of DDP's, which
// the greedy partition keeps within one tensor of 1/N.
TEST(ZeroTwoTest, AfterBackwardARankHoldsTheGradientsItOwnsOnly) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero2");
  config["model"]["hidden"] = Json::array({64, 64});
  config["parallel"]["bucket_mb"] = 0.004;  // about 4 KiB: several buckets
  std::vector<std::vector<int64_t>> held(2);
  std::vector<int64_t> owned(2), ddp(2), largest(2);
  for (const std::string mode : {"ddp", "zero2"}) {
    config["parallel"]["mode"] = mode;
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      auto probe = std::make_shared<GradientBytesAfterBackward>();
      Trainer trainer(config, {probe}, {}, communicator);
      trainer.fit();
      const auto r = static_cast<std::size_t>(rank);
      if (mode == "ddp") {
        ddp[r] = probe->held.back();
        return;
      }
      held[r] = probe->held;
      auto& zero = dynamic_cast<ShardedOptimizer&>(dynamic_cast<SAMOptimizer&>(*trainer.state().optimizer).base());
      owned[r] = zero.owned_numel() * 4;
      for (const auto& p : trainer.model().parameters()) largest[r] = std::max(largest[r], p.numel() * 4);
    });
  }
  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(held[r].size(), 10u) << "two backward passes a step for five steps";
    for (const int64_t bytes : held[r]) EXPECT_EQ(bytes, owned[r]) << "rank " << r;
    EXPECT_LE(owned[r], ddp[r] / 2 + largest[r]) << "rank " << r;
    EXPECT_LT(owned[r], ddp[r]) << "rank " << r;
  }
  EXPECT_EQ(owned[0] + owned[1], ddp[0]);
}

// A rank-local ascent keeps this rank's whole gradient for the ascent pass
// (DDP's gradient memory, docs/distributed.md says), then the descent is reduce-scattered.
TEST(ZeroTwoTest, ARankLocalAscentHoldsTheWholeLocalGradientForThatPassOnly) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": false})", "zero2");
  std::vector<std::vector<int64_t>> held(2);
  std::vector<int64_t> owned(2), total(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    auto probe = std::make_shared<GradientBytesAfterBackward>();
    Trainer trainer(config, {probe}, {}, communicator);
    trainer.fit();
    const auto r = static_cast<std::size_t>(rank);
    held[r] = probe->held;
    auto& zero = dynamic_cast<ShardedOptimizer&>(dynamic_cast<SAMOptimizer&>(*trainer.state().optimizer).base());
    owned[r] = zero.owned_numel() * 4;
    for (const auto& p : trainer.model().parameters()) total[r] += p.numel() * 4;
  });
  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(held[r].size(), 10u);
    for (std::size_t pass = 0; pass < 10; ++pass) {
      EXPECT_EQ(held[r][pass], pass % 2 == 0 ? total[r] : owned[r]) << "rank " << r << ", pass " << pass;
    }
  }
}

TEST(ZeroTwoTest, ASingleProcessRunEqualsOneWithoutSharding) {
  Json config = sam_config(R"({"rho": 0.05})", "zero2");
  Trainer sharded(config);
  sharded.fit();
  config["parallel"]["mode"] = "none";
  Trainer plain(config);
  plain.fit();
  // The same steps; the norm is summed over the one shard (the last bits may differ).
  EXPECT_LE(max_difference(test::weights_of(sharded), test::weights_of(plain)), 1e-6);
}

}  // namespace
}  // namespace basin
