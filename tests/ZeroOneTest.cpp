// ZeRO-1 (parallel.mode "zero1"): the sharded optimizer under SAM and its
// variants equals unsharded data parallel, its state consolidates, its
// partition and norm over shards are right.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/model/model.h"
#include "basin/core/parallel/zero/sharded_optimizer.h"
#include "basin/core/sharding/grad_norm.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin {
namespace {

using test::InjectOverflowInBackward;
using test::max_difference;
using test::sam_config;
using test::train_on_ranks;
using test::Weights;
using test::weights_of;

struct TwoGroupCase {
  std::string name;
  std::string optimizer;
};

void PrintTo(const TwoGroupCase& c, std::ostream* os) { *os << c.name; }

class ZeroOneTest : public ::testing::TestWithParam<TwoGroupCase> {};

TEST_P(ZeroOneTest, ZeroOneSamEqualsUnshardedSam) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "ddp");
  config["optimizer"] = Json::parse(GetParam().optimizer);
  config["schedulers"] = Json::parse(R"([{"name": "linear_warmup", "warmup": 3}])");
  const auto replicated = train_on_ranks(2, config);
  config["parallel"]["mode"] = "zero1";
  std::vector<double> local_lrs(4, -1);
  std::vector<int64_t> owned(2, 0), buffered(2, 0), total(2, 0);
  std::vector<Weights> sharded(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    trainer.fit();
    sharded[static_cast<std::size_t>(rank)] = weights_of(trainer);
    auto& sam = dynamic_cast<SAMOptimizer&>(*trainer.state().optimizer);
    auto& zero = dynamic_cast<ShardedOptimizer&>(sam.base());
    sam.sync_param_groups();
    zero.sync_param_groups();
    for (int g = 0; g < 2; ++g) local_lrs[static_cast<std::size_t>(rank * 2 + g)] = zero.local().param_groups()[g].options().get_lr();
    owned[static_cast<std::size_t>(rank)] = zero.owned_numel();
    for (const auto& b : sam.perturbed_buffers()) buffered[static_cast<std::size_t>(rank)] += b.numel();
    for (const auto& p : trainer.model().parameters()) total[static_cast<std::size_t>(rank)] += p.numel();
  });
  EXPECT_LE(max_difference(sharded[0], replicated[0]), 1e-5) << GetParam().name;
  EXPECT_EQ(max_difference(sharded[0], sharded[1]), 0.0);
  // Invariant 1: the warmup (5 steps, 3 of warmup) reached each rank's local optimizer, per group.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_DOUBLE_EQ(local_lrs[static_cast<std::size_t>(rank * 2)], 0.1);
    EXPECT_DOUBLE_EQ(local_lrs[static_cast<std::size_t>(rank * 2 + 1)], 0.02);
  }
  // Memory: SAM's buffers on each rank hold that rank's shard, and the shards cover the model.
  EXPECT_EQ(buffered, owned);
  EXPECT_EQ(owned[0] + owned[1], total[0]);
  EXPECT_LT(owned[0], total[0]);
  EXPECT_LT(owned[1], total[0]);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, ZeroOneTest,
    ::testing::Values(TwoGroupCase{"sgd_momentum", R"({"name": "sgd", "lr": 0.1, "momentum": 0.9,
                                      "param_groups": [{"params": "bias", "lr": 0.02}]})"},
                      TwoGroupCase{"adam", R"({"name": "adam", "lr": 0.1,
                                      "param_groups": [{"params": "bias", "lr": 0.02}]})"}),
    [](const auto& info) { return info.param.name; });

// Every SAM-family algorithm under ZeRO-1 follows its unsharded trajectory:
// descent reductions (GSAM's) over shards, WSAM's decoupled step on each
// owner's shard, moving averages on the synced ascent, LookSAM's g_v
// all-gathered from its owners, Momentum-SAM's perturbation from the owners
// of the momentum.
class VariantZeroOneTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(VariantZeroOneTest, ZeroOneEqualsDataParallel) {
  Json config = sam_config("{}", "ddp");
  config["algorithms"] = Json::object();
  config["algorithms"][GetParam().first] = Json::parse(GetParam().second);
  config["optimizer"] = Json::parse(R"({"name": "sgd", "lr": 0.1, "momentum": 0.9,
                                         "param_groups": [{"params": "bias", "lr": 0.02}]})");
  // Every parameter perturbed, and the weights alone (the biases stay at w).
  for (const char* perturb : {"", "weight"}) {
    config["algorithms"][GetParam().first]["perturb"] = perturb;
    config["parallel"]["mode"] = "ddp";
    const auto replicated = train_on_ranks(2, config);
    config["parallel"]["mode"] = "zero1";
    const auto sharded = train_on_ranks(2, config);
    EXPECT_LE(max_difference(sharded[0], replicated[0]), 1e-5) << GetParam().first << " perturb " << perturb;
    EXPECT_EQ(max_difference(sharded[0], sharded[1]), 0.0) << GetParam().first << " perturb " << perturb;
    EXPECT_EQ(max_difference(replicated[0], replicated[1]), 0.0) << GetParam().first << " perturb " << perturb;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantZeroOneTest,
                         ::testing::ValuesIn(test::sam_family()),
                         [](const auto& info) { return info.param.first; });

/// One weight used twice (tied, as a language model's embedding and output
/// layers are): the optimizer's groups list the tensor twice.
class TiedModel : public Model {
 public:
  TiedModel(Params& /*params*/, const DatasetInfo& info) {
    int64_t width = 1;
    for (int64_t d : info.input_shape) width *= d;
    tied_ = register_parameter("first", at::randn({width, width}) * (1.0 / std::sqrt(static_cast<double>(width))));
    register_parameter("second", tied_);
    out_ = register_module("out", torch::nn::Linear(width, info.num_classes));
  }
  at::Tensor forward(const at::Tensor& inputs) override {
    const at::Tensor h = inputs.flatten(1).matmul(tied_).tanh();
    return out_->forward(h.matmul(tied_).tanh());
  }

 private:
  at::Tensor tied_;
  torch::nn::Linear out_{nullptr};
};

BASIN_REGISTER(model_registry(), "tied_for_test", TiedModel);

TEST(DistributedTest, ATiedWeightIsClippedUnderZeroOneAsUnderDataParallel) {
  Json config = sam_config("{}", "ddp");
  config["model"] = Json::parse(R"({"name": "tied_for_test"})");
  config["grad_clip_norm"] = 0.05;  // well under the gradients' norm: every step clips
  Trainer probe(config);
  ASSERT_EQ(probe.model().named_parameters().size(), 4u);                    // first, second (the same), out's two
  ASSERT_EQ(probe.state().optimizer->param_groups()[0].params().size(), 3u);  // the optimizer has the tied one once
  const auto replicated = train_on_ranks(2, config);
  config["parallel"]["mode"] = "zero1";
  const auto sharded = train_on_ranks(2, config);
  EXPECT_LE(max_difference(sharded[0], replicated[0]), 1e-6);
  EXPECT_EQ(max_difference(sharded[0], sharded[1]), 0.0);
}

/// A first layer the optimizer never steps (frozen, as a fine-tuned
/// model's base is): its weight has no gradient and no optimizer state.
class FrozenFirstLayer : public Model {
 public:
  FrozenFirstLayer(Params& /*params*/, const DatasetInfo& info) {
    int64_t width = 1;
    for (int64_t d : info.input_shape) width *= d;
    first_ = register_module("first", torch::nn::Linear(width, 16));
    first_->weight.requires_grad_(false);
    out_ = register_module("out", torch::nn::Linear(16, info.num_classes));
  }
  at::Tensor forward(const at::Tensor& inputs) override {
    return out_->forward(first_->forward(inputs.flatten(1)).tanh());
  }

 private:
  torch::nn::Linear first_{nullptr}, out_{nullptr};
};

BASIN_REGISTER(model_registry(), "frozen_first_layer_for_test", FrozenFirstLayer);

// A parameter the sharded optimizer does not step is whole on every rank:
// it trains under zero1 and zero2 as under ddp, stays as it was, and the
// checkpoint saves it with the model's other tensors.
TEST(DistributedTest, AFrozenParameterIsPlacedWholeAndCheckpointedUnderZeroOneAndTwo) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "ddp");
  config["model"] = Json::parse(R"({"name": "frozen_first_layer_for_test"})");
  const auto replicated = train_on_ranks(2, config);
  for (const std::string mode : {"zero1", "zero2"}) {
    config["parallel"]["mode"] = mode;
    std::vector<Weights> sharded(2);
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      Trainer trainer(config, {}, {}, communicator);
      const at::Tensor frozen = trainer.model().named_parameters()["first.weight"];
      const at::Tensor before = frozen.detach().clone();
      trainer.fit();
      const ParameterPlacement placed = trainer.state().shards->placement(frozen);
      EXPECT_TRUE(placed.parameter.replicated_everywhere() && placed.gradient.replicated_everywhere() &&
                  placed.optimizer_state.replicated_everywhere()) << mode;
      EXPECT_FALSE(saves_rank_files(trainer.state())) << mode;
      const StateDict checkpoint = capture_checkpoint(trainer.engine());  // collective
      EXPECT_TRUE(frozen.equal(before)) << mode;
      const StateDict model = checkpoint.at("model").toGenericDict();
      ASSERT_TRUE(model.contains("first.weight")) << mode;
      EXPECT_TRUE(model.at("first.weight").toTensor().equal(before)) << mode;
      sharded[static_cast<std::size_t>(rank)] = weights_of(trainer);
    });
    EXPECT_LE(max_difference(sharded[0], replicated[0]), 1e-5) << mode;
    EXPECT_EQ(max_difference(sharded[0], sharded[1]), 0.0) << mode;
  }
}

TEST(DistributedTest, ZeroOneStateConsolidatesOnRankZero) {
  Json config = sam_config(R"({"rho": 0.05})", "zero1");
  config["max_steps"] = 3;
  std::vector<std::string> own(2), gathered;
  std::vector<std::size_t> loaded_states(2, 0), shard_sizes(2, 0);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    trainer.fit();
    auto& zero = dynamic_cast<ShardedOptimizer&>(dynamic_cast<SAMOptimizer&>(*trainer.state().optimizer).base());
    std::ostringstream bytes;
    torch::save(zero.local(), bytes);
    own[static_cast<std::size_t>(rank)] = bytes.str();
    auto archives = zero.consolidate_state(0);
    if (rank != 0) {
      EXPECT_TRUE(archives.empty());
      return;
    }
    gathered = archives;
    // Each archive loads into a fresh optimizer over that rank's shard, momentum buffers and all.
    for (int r = 0; r < 2; ++r) {
      Weights shard;
      for (const auto& p : zero.shard_of(r)) shard.push_back(at::zeros_like(p).requires_grad_(true));
      shard_sizes[static_cast<std::size_t>(r)] = shard.size();
      torch::optim::SGD restored(shard, torch::optim::SGDOptions(0.1).momentum(0.9));
      std::istringstream in(archives[static_cast<std::size_t>(r)]);
      torch::load(restored, in);
      loaded_states[static_cast<std::size_t>(r)] = restored.state().size();
    }
  });
  ASSERT_EQ(gathered.size(), 2u);
  EXPECT_EQ(gathered, own);
  EXPECT_EQ(loaded_states, shard_sizes);
  EXPECT_GT(shard_sizes[0], 0u);
  EXPECT_GT(shard_sizes[1], 0u);
}

// Rank-local ascent under ZeRO-1 perturbs the parameters a rank does not own
// in place; after a descent overflow only the owners' broadcast restores them.
TEST(DistributedTest, ZeroOneRankLocalAscentAndDescentOverflowEqualDdp) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": false})", "ddp");
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 256}})");
  auto inject_on_rank_one = [](int rank, Trainer& trainer) {
    if (rank == 1) trainer.engine().add_algorithm(std::make_shared<InjectOverflowInBackward>(2, Pass::kDescent, true));
  };
  const auto replicated = train_on_ranks(2, config, inject_on_rank_one);
  config["parallel"]["mode"] = "zero1";
  const auto sharded = train_on_ranks(2, config, inject_on_rank_one);
  EXPECT_LE(max_difference(sharded[0], replicated[0]), 1e-5);
  EXPECT_EQ(max_difference(sharded[0], sharded[1]), 0.0);
  EXPECT_EQ(max_difference(replicated[0], replicated[1]), 0.0);
}

TEST(DistributedTest, PartitionIsGreedyBySizeAndNeverSplitsATensor) {
  EXPECT_EQ(ShardedOptimizer::partition({10, 7, 5, 3, 1}, 2), (std::vector<int>{0, 1, 1, 0, 1}));
  EXPECT_EQ(ShardedOptimizer::partition({4, 4, 4}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(ShardedOptimizer::partition({5}, 4), (std::vector<int>{0}));
}

TEST(DistributedTest, NormOverShardsEqualsTheFullNorm) {
  std::vector<double> norms(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    // The same tensors on both ranks (no shared random generator across threads).
    std::vector<at::Tensor> params = {at::arange(7, at::kFloat).sin(), at::arange(9, at::kFloat).cos().reshape({3, 3}),
                                      at::arange(20, at::kFloat).mul(0.3).sin()};
    torch::optim::SGD full(params, torch::optim::SGDOptions(0.1));
    ShardedOptimizer sharded(full, [](std::vector<torch::optim::OptimizerParamGroup> groups) {
      return std::make_shared<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(0.1));
    }, communicator);
    norms[static_cast<std::size_t>(rank)] = global_norm_over_shards(params, params, sharded).item<double>();
    if (rank == 0) {
      EXPECT_NEAR(norms[0], global_norm(params).item<double>(), 1e-5);
    }
  });
  EXPECT_EQ(norms[0], norms[1]);
}

}  // namespace
}  // namespace basin
