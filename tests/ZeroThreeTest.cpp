// ZeRO-3 (parameters sharded too, FSDP-style), ranks as threads: the same
// training as data parallel for the optimizers and the SAM family, and what
// each rank holds at rest and during a step.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include <ATen/ATen.h>

#include "fully_sharded_of.h"
#include "zero_three_follows_ddp.h"
#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/engine/callback.h"
#include "basin/core/model/model.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/parallel/zero3/fully_sharded_model.h"
#include "basin/core/parallel/zero3/fully_sharded_optimizer.h"
#include "distributed_util.h"
#include "local_gradients.h"
#include "test_util.h"

namespace basin {
namespace {

using test::expect_zero_three_follows_ddp;
using test::max_difference;
using test::sam_config;

/// Runs `call` after every step, before the schedulers move the lr on.
class OnAfterStep : public Algorithm {
 public:
  explicit OnAfterStep(std::function<void()> call) : call_(std::move(call)) {}
  std::string name() const override { return "on_after_step"; }
  bool match(Event event, const State&) const override { return event == Event::AFTER_STEP; }
  void apply(Event, State&, Logger&) override { call_(); }

 private:
  std::function<void()> call_;
};

/// Bytes of the tensors in `optimizer`'s per-parameter state.
int64_t state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& entry : parameter_states(optimizer, ParameterNumbering(optimizer))) {
    for (const auto& item : entry.value().toGenericDict()) {
      if (item.value().isTensor() && item.value().toTensor().dim() > 0) {
        bytes += item.value().toTensor().numel() * static_cast<int64_t>(item.value().toTensor().element_size());
      }
    }
  }
  return bytes;
}

Json two_groups(const std::string& optimizer) {
  return Json::parse(R"({"name": ")" + optimizer + R"(", "lr": 0.1, "momentum": 0.9,
                         "param_groups": [{"params": "bias", "lr": 0.02}]})");
}

TEST(ZeroThreeTest, SgdAndAdamWithAndWithoutSamEqualDataParallel) {
  for (const std::string optimizer : {"sgd", "adam"}) {
    for (const std::string sam : {"", R"({"rho": 0.05, "sync_ascent": true})"}) {
      Json config = sam_config(sam.empty() ? "{}" : sam, "ddp");
      if (sam.empty()) config["algorithms"] = Json::object();
      config["optimizer"] = two_groups(optimizer);
      if (optimizer == "adam") config["optimizer"].erase("momentum"), config["optimizer"]["lr"] = 0.01;
      config["schedulers"] = Json::parse(R"([{"name": "linear_warmup", "warmup": 3}])");
      expect_zero_three_follows_ddp(config, optimizer + " " + (sam.empty() ? "without sam" : sam));
    }
  }
}

TEST(ZeroThreeTest, CnnAndResnetWithSamEqualDataParallelAtTwoAndThreeRanks) {
  for (const std::string model : {R"({"name": "cnn", "channels": [4, 6], "hidden": 8})",
                                  R"({"name": "resnet", "width": 4, "blocks": [1, 1]})"}) {
    Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "ddp");
    config["model"] = Json::parse(model);
    config["max_steps"] = 3;
    for (const int world : {2, 3}) expect_zero_three_follows_ddp(config, model + " at " + std::to_string(world), world);
  }
}

TEST(ZeroThreeTest, RankLocalAscentIsRefusedNamingSyncAscent) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": false})", "zero3");
  try {
    test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) { Trainer trainer(config, {}, {}, communicator); });
    FAIL() << "a rank-local ascent under zero3 was accepted";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("algorithms.sam.sync_ascent"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("zero3"), std::string::npos) << error.what();
  }
}

// MESA's teacher is the moving average of the whole model, swapped in for
// a forward: it needs every parameter whole, so zero3 refuses it by name.
TEST(ZeroThreeTest, MesaIsRefusedNamingItsKeyAndTheMode) {
  Json config = sam_config("{}", "zero3");
  config["algorithms"] = Json::parse(R"({"mesa": {}})");
  try {
    test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) { Trainer trainer(config, {}, {}, communicator); });
    FAIL() << "mesa under zero3 was accepted";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("algorithms.mesa"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("zero3"), std::string::npos) << error.what();
  }
}

// Every SAM-family algorithm, with its (synced) ascent, every parameter
// perturbed or the weights alone.
class VariantZeroThreeTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(VariantZeroThreeTest, ZeroThreeEqualsDataParallel) {
  const std::string name = GetParam().first;
  Json config = sam_config("{}", "ddp");
  config["algorithms"] = Json::object();
  config["algorithms"][name] = Json::parse(GetParam().second);
  config["algorithms"][name]["sync_ascent"] = true;
  config["optimizer"] = two_groups("sgd");
  for (const char* perturb : {"", "weight"}) {
    config["algorithms"][name]["perturb"] = perturb;
    expect_zero_three_follows_ddp(config, name + " perturb " + perturb);
  }
  // The cnn and the resnet (BatchNorm; its stem's in the root unit), every parameter perturbed.
  config["algorithms"][name]["perturb"] = "";
  config["max_steps"] = 3;
  for (const char* model : {R"({"name": "cnn", "channels": [4, 6], "hidden": 8})",
                            R"({"name": "resnet", "width": 4, "blocks": [1]})"}) {
    config["model"] = Json::parse(model);
    expect_zero_three_follows_ddp(config, name + " on " + model);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantZeroThreeTest, ::testing::ValuesIn(test::sam_family()),
                         [](const auto& info) { return info.param.first; });

// The grad scaler's verdict covers every shard: an inf in one rank's
// gradient, in either pass, skips the step on both ranks, as under ddp.
TEST(ZeroThreeTest, AnOverflowInOneRanksGradientSkipsTheStepOnEveryRankAsUnderDataParallel) {
  for (const Pass pass : {Pass::kAscent, Pass::kDescent}) {
    Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "ddp");
    config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 256}})");
    auto inject_on_rank_one = [&](int rank, Trainer& trainer) {
      if (rank == 1) trainer.engine().add_algorithm(std::make_shared<test::InjectOverflowInBackward>(2, pass, true));
    };
    std::map<std::string, std::vector<test::Weights>> weights;
    for (const std::string mode : {"ddp", "zero3"}) {
      config["parallel"]["mode"] = mode;
      std::vector<int64_t> skipped(2, -1);
      weights[mode].resize(2);
      test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
        Trainer trainer(config, {}, {}, communicator);
        inject_on_rank_one(rank, trainer);
        skipped[static_cast<std::size_t>(rank)] = trainer.fit().skipped_steps;
        weights[mode][static_cast<std::size_t>(rank)] = test::weights_of(trainer);
      });
      EXPECT_EQ(skipped, (std::vector<int64_t>{1, 1})) << mode;
    }
    EXPECT_LE(max_difference(weights["zero3"][0], weights["ddp"][0]), 1e-5);
    EXPECT_EQ(max_difference(weights["zero3"][0], weights["zero3"][1]), 0.0);
  }
}

// Under bf16 autocast: one step (no SAM) as ddp's up to the fp32 sums of
// the same local gradients in other orders (local_gradients.h: both sum
// 2 ranks' 2 microbatches, 4 terms, and clip); SAM's 5 steps, and 2 of the
// cnn and the resnet, nearer ddp's than the start (zero_three_follows_ddp.h).
TEST(ZeroThreeTest, Bf16MicrobatchesAndClippingEqualDataParallel) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "ddp");
  config["precision"] = "amp_bf16";
  config["data"]["microbatches"] = 2;
  config["grad_clip_norm"] = 0.05;  // below the gradients' norm: every step clips
  config["optimizer"] = two_groups("sgd");
  test::expect_one_step_follows_ddp(config, "zero3", 2);
  expect_zero_three_follows_ddp(config, "bf16, microbatches, clipping", 2, 0, true);
  config["max_steps"] = 2;
  for (const char* model : {R"({"name": "cnn", "channels": [4, 6], "hidden": 8})",
                            R"({"name": "resnet", "width": 4, "blocks": [1]})"}) {
    config["model"] = Json::parse(model);
    test::expect_one_step_follows_ddp(config, "zero3", 2);
    expect_zero_three_follows_ddp(config, std::string("bf16, microbatches, clipping, ") + model, 2, 0, true);
  }
}

// The failure that started it all, under full sharding: SAM wraps on
// AFTER_SHARDING, so the lr that warms up from 0 reaches the optimizer
// that steps the shards, step by step (the lr each step used), and the model learns.
TEST(ZeroThreeTest, SamWrapsAfterShardingSoTheShardsOptimizerFollowsTheWarmupAndTheModelLearns) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  config["max_steps"] = 0;
  config["max_epochs"] = 3;
  config["schedulers"] = Json::parse(R"([{"name": "linear_warmup", "warmup": 4}])");
  std::vector<std::vector<double>> lrs(2);
  std::vector<double> last_loss(2);
  std::vector<test::Weights> start(2), end(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    auto& sam = dynamic_cast<SAMOptimizer&>(*trainer.state().optimizer);
    auto& sharded = dynamic_cast<FullyShardedOptimizer&>(sam.base());
    const auto r = static_cast<std::size_t>(rank);
    trainer.engine().add_algorithm(std::make_shared<OnAfterStep>([&, r] {
      lrs[r].push_back(sharded.local().param_groups().front().options().get_lr());
    }));
    start[r] = test::weights_of(trainer);
    const FitSummary summary = trainer.fit();
    end[r] = test::weights_of(trainer);
    last_loss[r] = summary.final_train_loss;
  });
  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(lrs[r].size(), 12u) << "4 steps an epoch for 3 epochs";
    for (std::size_t t = 0; t < lrs[r].size(); ++t) {
      EXPECT_DOUBLE_EQ(lrs[r][t], 0.1 * std::min(1.0, static_cast<double>(t) / 4.0)) << "step " << t;
    }
    EXPECT_GT(max_difference(start[r], end[r]), 1e-3) << "the shards' optimizer stepped";
    EXPECT_LT(last_loss[r], std::log(3.0)) << "below chance's loss on 3 classes";
  }
}

TEST(ZeroThreeTest, ASingleProcessRunEqualsOneWithoutSharding) {
  Json config = sam_config(R"({"rho": 0.05})", "zero3");
  Trainer sharded(config);
  sharded.fit();
  config["parallel"]["mode"] = "none";
  config["algorithms"]["sam"]["sync_ascent"] = true;
  Trainer plain(config);
  plain.fit();
  EXPECT_LE(max_difference(test::weights_of(sharded), test::weights_of(plain)), 1e-6);
}

/// One hand-written forward and synced backward of the resnet (its stem's
/// BatchNorm is in the root unit) under zero3 on 2 ranks, with `between`
/// run after the forward; each rank's shards' gradients.
std::vector<test::Weights> hand_step_gradients(const std::function<void(Model&, const at::Tensor&)>& between,
                                               const std::function<void(Trainer&, const at::Tensor&)>& before = {}) {
  Json config = sam_config("{}", "zero3");
  config["algorithms"] = Json::object();
  config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
  std::vector<test::Weights> grads(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    FullyShardedModel& sharded = *test::fully_sharded_of(trainer);
    const at::Tensor x = at::ones({4, 1, 6, 6}).mul(rank + 1).add(at::arange(36).view({1, 1, 6, 6}).div(36.0));
    if (before) before(trainer, x);
    const at::Tensor loss = trainer.model().run(x).pow(2).mean();
    between(trainer.model(), x);
    sharded.prepare_for_backward();
    loss.backward();
    sharded.finish_backward();
    for (const auto& s : sharded.shards()) grads[static_cast<std::size_t>(rank)].push_back(s.grad().clone());
  });
  return grads;
}

// An evaluation (a forward without a graph) between a forward and its
// backward frees what it gathered, but not the root, which that backward
// still reads (the stem's BatchNorm saved its weight's storage).
TEST(ZeroThreeTest, AnEvaluationBetweenAForwardAndItsBackwardLeavesTheGradientsAsTheyWere) {
  const auto plain = hand_step_gradients([](Model&, const at::Tensor&) {});
  const auto evaluated = hand_step_gradients([](Model& model, const at::Tensor& x) {
    at::NoGradGuard no_grad;
    model.run(x.flip(0));
  });
  for (std::size_t r = 0; r < 2; ++r) EXPECT_EQ(max_difference(evaluated[r], plain[r]), 0.0) << "rank " << r;
}

// A forward that throws (here: inputs of the wrong shape) leaves nothing
// gathered, and the next step runs as if it never happened.
TEST(ZeroThreeTest, AFailedForwardHoldsNothingWholeAndTheNextStepIsUnchanged) {
  const auto plain = hand_step_gradients([](Model&, const at::Tensor&) {});
  const auto after_failure = hand_step_gradients([](Model& model, const at::Tensor& x) {
    at::NoGradGuard no_grad;
    EXPECT_THROW(model.run(x.view({4, 36})), std::exception);
  });
  for (std::size_t r = 0; r < 2; ++r) EXPECT_EQ(max_difference(after_failure[r], plain[r]), 0.0) << "rank " << r;
  // With a graph too: the root (the stem's BatchNorm) is freed, no backward being due.
  Json config = sam_config("{}", "zero3");
  config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
  test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    EXPECT_THROW(trainer.model().run(at::ones({4, 36})), std::exception);  // the stem wants images
    EXPECT_EQ(test::fully_sharded_of(trainer)->gathered_bytes(), 0) << "a failed forward left parameters whole";
  });
}

// A backward that throws (here from a hook on the first unit's weight, once
// later units' reduce-scatters are under way) is abandoned: nothing of it is
// left whole, and the next step's gradients are as if it never ran.
TEST(ZeroThreeTest, ABackwardThatThrowsIsAbandonedAndTheNextStepIsUnchanged) {
  const auto plain = hand_step_gradients([](Model&, const at::Tensor&) {});
  const auto after_failure = hand_step_gradients([](Model&, const at::Tensor&) {}, [](Trainer& trainer, const at::Tensor& x) {
    FullyShardedModel& sharded = *test::fully_sharded_of(trainer);
    const at::Tensor loss = trainer.model().run(x).pow(2).mean();
    at::Tensor first = trainer.model().units().front()->parameters().front();
    const auto hook = first.register_hook([](const at::Tensor&) -> at::Tensor { throw std::runtime_error("injected"); });
    sharded.prepare_for_backward();
    EXPECT_THROW(loss.backward(), std::exception);
    first.remove_hook(hook);
    sharded.abandon_backward();
    EXPECT_EQ(sharded.gathered_bytes(), 0) << "an abandoned backward left parameters whole";
    for (const auto& p : sharded.parameters()) EXPECT_FALSE(p.grad().defined()) << "a whole gradient left behind";
    for (const auto& s : sharded.shards()) at::Tensor(s).mutable_grad().reset();  // as zero_grad after a failed step
  });
  for (std::size_t r = 0; r < 2; ++r) EXPECT_EQ(max_difference(after_failure[r], plain[r]), 0.0) << "rank " << r;
}

int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
  return bytes;
}

/// Bytes the model's units hold whole (their sizes, whatever their storage holds now).
std::vector<int64_t> unit_bytes(Model& model) {
  std::vector<int64_t> bytes;
  for (torch::nn::Module* unit : model.units()) bytes.push_back(bytes_of(unit->parameters()));
  return bytes;
}

// At rest a rank holds its rows of every parameter and nothing whole: the
// shards, their gradients, Adam's two moments and SAM's backup are about 1/N
// of ddp's; during a step the whole parameters stay within two units.
TEST(ZeroThreeTest, ARankHoldsAboutOneNthAtRestAndAtMostTwoUnitsWholeDuringAStep) {
  for (const int world : {2, 4}) {
    for (const std::string model : {R"({"name": "mlp", "hidden": [64, 64]})",
                                    R"({"name": "resnet", "width": 8, "blocks": [1, 1]})"}) {
      Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
      config["model"] = Json::parse(model);
      config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
      config["max_steps"] = 2;
      std::vector<int64_t> shard(static_cast<std::size_t>(world)), state(shard), backup(shard), grads(shard);
      std::vector<int64_t> whole_at_rest(shard), peak(shard), total(shard), two_units(shard), largest_unit(shard), root(shard);
      test::run_ranks(world, [&](int rank, std::shared_ptr<Communicator> communicator) {
        Trainer trainer(config, {}, {}, communicator);
        FullyShardedModel& sharded = *test::fully_sharded_of(trainer);
        sharded.reset_peak();
        trainer.fit();
        const auto r = static_cast<std::size_t>(rank);
        auto& sam = dynamic_cast<SAMOptimizer&>(*trainer.state().optimizer);
        auto& local = dynamic_cast<FullyShardedOptimizer&>(sam.base()).local();
        shard[r] = sharded.shard_bytes();
        for (const auto& s : sharded.shards()) grads[r] += bytes_of({s.grad()});
        for (const auto& p : sharded.parameters()) {
          EXPECT_FALSE(p.grad().defined()) << "a whole gradient left behind";
          whole_at_rest[r] += static_cast<int64_t>(p.storage().nbytes());
          total[r] += p.numel() * static_cast<int64_t>(p.element_size());
        }
        state[r] = state_bytes(local);
        backup[r] = bytes_of(sam.perturbed_buffers());
        peak[r] = sharded.peak_gathered_bytes();
        auto units = unit_bytes(trainer.model());
        std::sort(units.rbegin(), units.rend());
        two_units[r] = units.at(0) + units.at(1);
        largest_unit[r] = units.at(0);
        root[r] = total[r];
        for (int64_t u : unit_bytes(trainer.model())) root[r] -= u;
      });
      const std::string what = model + " at " + std::to_string(world) + " ranks";
      int64_t shards = 0;
      for (std::size_t r = 0; r < shard.size(); ++r) {
        shards += shard[r];
        EXPECT_EQ(whole_at_rest[r], 0) << what;
        EXPECT_LE(shard[r], total[r] / world + total[r] / 20) << what << ", rank " << r;
        EXPECT_EQ(grads[r], shard[r]) << what;
        EXPECT_EQ(state[r], 2 * shard[r]) << what << ": Adam's two moments, on the shard";
        EXPECT_EQ(backup[r], shard[r]) << what << ": SAM's backup, of the shard";
        EXPECT_GE(peak[r], largest_unit[r]) << what << ": every unit was whole once";
        EXPECT_LE(peak[r], two_units[r] + root[r]) << what << ", rank " << r;
      }
      EXPECT_EQ(shards, total[0]) << what << ": the shards cover every parameter once";
    }
  }
}

}  // namespace
}  // namespace basin
