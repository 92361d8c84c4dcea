// Resharding checkpoints: a checkpoint written under any parallel mode at N
// ranks resumes under any mode at M ranks, with its weights, optimizer and
// rule state, schedulers and data position, cut anew for the M ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/sharded_checkpoint.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/data/data_pipeline.h"
#include "basin/core/engine/callback.h"
#include "basin/core/optim/hyperparameters.h"
#include "basin/core/optim/scheduler.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/train/trainer.h"
#include "distributed_util.h"
#include "expect_same_state.h"
#include "test_util.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

/// A run with state in every part a resume carries: Adam's moments,
/// LookSAM's stored gradient component, a cosine schedule, a grad scaler
/// whose scale grew at every step, an open epoch.
Json run_config(const std::string& mode, const std::string& checkpoints) {
  Json config = test::smoke_config();
  config["max_steps"] = 3;
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  config["algorithms"] = Json::parse(R"({"looksam": {"rho": 0.05, "k": 2, "sync_ascent": true}})");
  config["schedulers"] = Json::parse(R"([{"name": "cosine_warmup", "warmup": 1}])");
  config["parallel"] = Json{{"mode", mode}, {"timeout_seconds", 60}};
  config["callbacks"] = Json{{"grad_scaler", {{"init_scale", 1024}, {"growth_interval", 1}}}};
  if (!checkpoints.empty()) {
    config["callbacks"]["checkpoint"] = Json{{"every_steps", 3}, {"keep_last", 0}, {"dir", checkpoints}};
  }
  return config;
}

/// Runs `body` on each of `world` ranks of `mode` ("none": one process, no communicator).
void on_ranks(const std::string& mode, int world, const std::function<void(int, std::shared_ptr<Communicator>)>& body) {
  if (mode == "none") {
    body(0, nullptr);
  } else {
    test::run_ranks(world, body);
  }
}

/// The run as one whole checkpoint: the file itself, or a manifest's rank files joined.
StateDict whole_form(const std::string& path) {
  const StateDict checkpoint = read_checkpoint_file(path);
  return is_sharded_checkpoint(checkpoint) ? consolidate_checkpoint(path) : checkpoint;
}

using test::expect_same;

struct Layout {
  std::string mode;
  int world;
  int shard_group_size = 0;  // hsdp's
};

std::string text(const Layout& layout) {
  return layout.mode + " at " + std::to_string(layout.world) +
         (layout.shard_group_size > 0 ? " in groups of " + std::to_string(layout.shard_group_size) : "");
}

Json layout_config(const Layout& layout, const std::string& checkpoints) {
  Json config = run_config(layout.mode, checkpoints);
  if (layout.shard_group_size > 0) config["parallel"]["shard_group_size"] = layout.shard_group_size;
  return config;
}

/// Saves `from`'s run at step 3, resumes it as `to` with resharding, saves
/// again at once, and compares the two whole forms part by part.
void expect_resharded_resume_keeps_everything(const Layout& from, const Layout& to, const Json& model,
                                               const Json& both = Json::object()) {
  SCOPED_TRACE(text(from) + " -> " + text(to));
  test::TempDir dir;
  Json saving = layout_config(from, dir.file("saved"));
  saving["model"] = model;
  saving.merge_patch(both);
  on_ranks(from.mode, from.world, [&](int, std::shared_ptr<Communicator> communicator) {
    Trainer(saving, {}, {}, communicator).fit();
  });
  const std::string path = dir.file("saved/" + checkpoint_file_name(3));
  Json resuming = layout_config(to, "");
  resuming["model"] = model;
  resuming.merge_patch(both);
  const fs::path again = dir.file("again");
  fs::create_directories(again);
  StateDict whole_again = new_state_dict();
  std::mutex written;
  on_ranks(to.mode, to.world, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(resuming, {}, {}, communicator);
    const bool sharded = saves_rank_files(trainer.state());
    trainer.resume(checkpoint_for_rank(path, read_checkpoint_file(path), to.world, trainer.strategy().rows_layout(), true),
                   ResumeOptions{false, true});
    const StateDict captured = capture_checkpoint(trainer.engine());  // collective
    if (sharded) {  // as the checkpoint callback writes it: each rank's file, then the manifest
      write_checkpoint_file((again / rank_file_name(3, rank)).string(), captured);
      communicator->barrier();
      if (rank == 0) write_checkpoint_file((again / checkpoint_file_name(3)).string(), sharded_manifest(captured, 3, to.world));
    } else if (rank == 0) {
      write_checkpoint_file((again / checkpoint_file_name(3)).string(), captured);
    }
  });
  const StateDict before = whole_form(path);
  const StateDict after = whole_form((again / checkpoint_file_name(3)).string());
  // The whole form joins one hsdp group's files: each other group's rank resumed with its place's rows and state.
  for (int r = to.shard_group_size; to.shard_group_size > 0 && r < to.world; ++r) {
    const StateDict replica = read_checkpoint_file((again / rank_file_name(3, r)).string());
    const StateDict first = read_checkpoint_file((again / rank_file_name(3, r % to.shard_group_size)).string());
    for (const char* part : {"shards", "optimizer", "algorithms"}) {
      expect_same(first.at(part), replica.at(part), "rank " + std::to_string(r) + "'s " + part);
    }
  }
  for (const char* part : {"model", "optimizer", "algorithms", "schedulers", "callbacks", "loop", "timestamp"}) {
    ASSERT_TRUE(before.contains(part) && after.contains(part)) << part;
    expect_same(before.at(part), after.at(part), part);
  }
  // Each rank continues a saved stream: rank r the saving run's rank r mod N.
  const auto& saved_rng = before.at("rng").toListRef();
  const auto& resumed_rng = after.at("rng").toListRef();
  ASSERT_EQ(resumed_rng.size(), static_cast<std::size_t>(to.world));
  for (std::size_t r = 0; r < resumed_rng.size(); ++r) {
    expect_same(saved_rng[r % saved_rng.size()], resumed_rng[r], "rng[" + std::to_string(r) + "]");
  }
  // What was compared moved: LookSAM kept a component, Adam its moments.
  const auto looksam = before.at("algorithms").toGenericDict().at("looksam").toGenericDict();
  EXPECT_GT(looksam.at("parameters").toGenericDict().size(), 0u);
  EXPECT_GT(before.at("optimizer").toGenericDict().at("state").toGenericDict().size(), 0u);
  EXPECT_EQ(before.at("callbacks").toGenericDict().at("grad_scaler").toGenericDict().at("scale").toDouble(), 1024.0 * 8);
}

// N -> M for N, M in {1, 2, 3, 4}, across the modes (4 ranks of the MLP's
// 3-row output layer leave rank 3 with no rows of it).
TEST(ReshardingTest, ACheckpointOfAnyModeAndWorldSizeResumesUnderAnotherWithEverythingItHeld) {
  const Json mlp = test::smoke_config()["model"];
  const std::vector<std::pair<Layout, Layout>> moves = {
      {{"zero3", 2}, {"zero3", 3}}, {{"zero3", 3}, {"zero3", 2}}, {{"zero3", 4}, {"none", 1}},
      {{"none", 1}, {"zero3", 4}},  {{"ddp", 2}, {"zero3", 4}},   {{"zero3", 2}, {"ddp", 2}},
      {{"zero1", 4}, {"zero3", 1}}, {{"zero2", 3}, {"zero1", 4}}, {{"zero3", 1}, {"zero2", 3}},
      {{"ddp", 4}, {"zero2", 2}},   {{"zero3", 4}, {"zero3", 3}}, {{"zero2", 1}, {"ddp", 2}}};
  for (const auto& [from, to] : moves) expect_resharded_resume_keeps_everything(from, to, mlp);
}

// hsdp's files: every rank's, the rows of a group's (2 x 2 and 1 x 3 here).
TEST(ReshardingTest, AnHsdpCheckpointReshardsToAndFromEveryLayout) {
  const Json mlp = test::smoke_config()["model"];
  const std::vector<std::pair<Layout, Layout>> moves = {
      {{"hsdp", 4, 2}, {"zero3", 3}}, {{"zero3", 2}, {"hsdp", 4, 2}}, {{"hsdp", 4, 2}, {"hsdp", 4, 2}},
      {{"hsdp", 4, 2}, {"hsdp", 4, 4}}, {{"hsdp", 3, 3}, {"hsdp", 2, 1}}, {{"hsdp", 4, 2}, {"none", 1}},
      {{"ddp", 2}, {"hsdp", 4, 2}}};
  for (const auto& [from, to] : moves) expect_resharded_resume_keeps_everything(from, to, mlp);
}

// BatchNorm's statistics (buffers, replicated) and convolutions (4-d rows).
TEST(ReshardingTest, AResNetsCheckpointReshardsWithItsBuffers) {
  const Json resnet = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
  expect_resharded_resume_keeps_everything({"zero3", 3}, {"ddp", 2}, resnet);
  expect_resharded_resume_keeps_everything({"ddp", 2}, {"zero3", 3}, resnet);
}

// zero3 with bf16 gathers keeps fp32 master shards: they reshard as any.
TEST(ReshardingTest, ZeroThreeWithBf16GathersReshardsItsFp32Masters) {
  const Json policy = Json::parse(R"({"precision": "amp_bf16", "parallel": {"mixed_precision": {"param_dtype": "bf16"}}})");
  expect_resharded_resume_keeps_everything({"zero3", 2}, {"zero3", 3}, test::smoke_config()["model"], policy);
  expect_resharded_resume_keeps_everything({"zero3", 3}, {"zero3", 1}, test::smoke_config()["model"], policy);
}

/// The run's parameters at the end, whole, and its step count.
struct Finish {
  std::vector<at::Tensor> weights;
  int64_t steps = 0;
  double lr = 0;
};

// With world size x batch size kept (2 x 16 -> 4 x 8), every step after the
// resume takes the same 32 samples as the run that went on at 2 ranks, and
// ends where it ends, up to the order of the sums (1e-5): "the same batches".
TEST(ReshardingTest, ARunResumedAtTwiceTheRanksWithHalfTheBatchEndsAsTheRunThatWentOnAtTwo) {
  test::TempDir dir;
  Json config = run_config("zero3", dir.file("c"));
  config["max_steps"] = 0;  // 2 epochs of 4 steps
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05, "sync_ascent": true}})");
  auto finish = [](Trainer& trainer, Finish& out) {
    const FitSummary summary = trainer.fit();
    auto weights = trainer.whole_parameters();  // collective
    out = {weights, summary.steps, trainer.state().optimizer->param_groups().front().options().get_lr()};
  };
  Finish went_on, resumed, start;
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    Finish mine;
    finish(trainer, mine);
    if (rank == 0) went_on = mine;
  });
  Json halves = config;
  halves["data"]["batch_size"] = 8;
  halves["callbacks"].erase("checkpoint");
  const std::string path = dir.file("c/" + checkpoint_file_name(3));
  test::run_ranks(4, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(halves, {}, {}, communicator);
    // Another batch size is another config: allowed explicitly.
    trainer.resume(checkpoint_for_rank(path, read_checkpoint_file(path), 4, trainer.strategy().rows_layout(), true),
                   ResumeOptions{true, true});
    Finish mine;
    finish(trainer, mine);
    if (rank == 0) resumed = mine;
  });
  ASSERT_EQ(resumed.steps, went_on.steps);
  EXPECT_EQ(went_on.steps, 8);
  EXPECT_DOUBLE_EQ(resumed.lr, went_on.lr);
  ASSERT_EQ(resumed.weights.size(), went_on.weights.size());
  for (std::size_t i = 0; i < went_on.weights.size(); ++i) {
    const double gap = (resumed.weights[i] - went_on.weights[i]).abs().max().item<double>();
    EXPECT_LE(gap, 1e-5) << "parameter " << i;
  }
  // The 5 steps after the resume moved the weights far beyond that.
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Json three = config;
    three["max_steps"] = 3;
    three["callbacks"].erase("checkpoint");
    Trainer trainer(three, {}, {}, communicator);
    Finish mine;
    finish(trainer, mine);
    if (rank == 0) start = mine;
  });
  EXPECT_GT((start.weights.front() - went_on.weights.front()).abs().max().item<double>(), 1e-3);
}

/// The dataset ids of each step's batch on this rank, in order.
class BatchIds : public Callback {
 public:
  std::string name() const override { return "batch_ids"; }
  bool on_batch_start(const State& state, Logger&) override {
    const at::Tensor ids = state.batch.ids.cpu().to(at::kLong);
    steps.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    return false;
  }
  std::vector<std::vector<int64_t>> steps;
};

// With the batch size kept, a 2-rank checkpoint resumed on 1 rank continues
// at the same sample of the epoch's order (96 of 128 taken: 2 steps of 16
// remain, where 2 ranks had 1 of 32), and the cosine schedule's horizon
// becomes the steps the run now takes (3 + 2 + 8), so it ends at its minimum.
TEST(ReshardingTest, AResumeOnFewerRanksContinuesAtTheSameSampleAndTheScheduleEndsWithTheRun) {
  test::TempDir dir;
  Json config = run_config("ddp", dir.file("c"));
  config["max_steps"] = 0;
  test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) {
    Json three = config;
    three["max_steps"] = 3;
    Trainer(three, {}, {}, communicator).fit();
  });
  Json alone = config;
  alone["parallel"]["mode"] = "none";
  alone["callbacks"].erase("checkpoint");
  const std::string path = dir.file("c/" + checkpoint_file_name(3));
  // A checkpoint from before the loop kept its data position: 3 steps of 2 x 16 taken.
  StateDict old = read_checkpoint_file(path).copy();
  StateDict loop = old.at("loop").toGenericDict().copy();
  ASSERT_TRUE(loop.erase("epoch_samples"));
  old.insert_or_assign("loop", loop);
  for (const StateDict& checkpoint : {read_checkpoint_file(path), old}) {
    auto ids = std::make_shared<BatchIds>();
    Trainer trainer(alone, {ids});
    trainer.resume(checkpoint_for_rank(path, checkpoint, 1, std::nullopt, true), ResumeOptions{false, true});
    const FitSummary summary = trainer.fit();
    EXPECT_EQ(summary.steps, 3 + 2 + 8);
    ASSERT_EQ(ids->steps.size(), 10u);
    const auto order = epoch_order(128, 3, 0, true);
    EXPECT_EQ(ids->steps[0], std::vector<int64_t>(order.begin() + 96, order.begin() + 112));
    EXPECT_EQ(ids->steps[1], std::vector<int64_t>(order.begin() + 112, order.end()));
    const auto next = epoch_order(128, 3, 1, true);
    EXPECT_EQ(ids->steps[2], std::vector<int64_t>(next.begin(), next.begin() + 16));
    // cosine_warmup decays to 0 at its horizon: the run's last step.
    EXPECT_EQ(trainer.state().optimizer->param_groups().front().options().get_lr(), 0.0);
    EXPECT_EQ(trainer.state().schedulers.front()->count(), 13);
  }
}

// An epoch schedule's horizon is the epochs the resized run takes: 2, though
// its 9 steps (3 at 1 rank, 2 + 4 at 2) would make 3 epochs of 2 ranks' 4.
TEST(ReshardingTest, AnEpochScheduleStillEndsWithTheRunAfterAResumeOnMoreRanks) {
  test::TempDir dir;
  Json config = run_config("none", dir.file("c"));
  config["max_steps"] = 0;
  config["optimizer"]["weight_decay"] = 0.01;
  config["schedulers"].push_back(Json::parse(R"({"name": "polynomial", "interval": "epoch", "hyperparameter": "weight_decay"})"));
  Json three = config;
  three["max_steps"] = 3;
  Trainer(three).fit();
  Json two = config;
  two["parallel"]["mode"] = "ddp";
  two["callbacks"].erase("checkpoint");
  const std::string path = dir.file("c/" + checkpoint_file_name(3));
  test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(two, {}, {}, communicator);
    trainer.resume(checkpoint_for_rank(path, read_checkpoint_file(path), 2, std::nullopt, true), ResumeOptions{false, true});
    EXPECT_EQ(trainer.fit().steps, 3 + 2 + 4);
    EXPECT_EQ(trainer.state().schedulers.back()->count(), 2);
    EXPECT_EQ(get_hyperparameter(trainer.state().optimizer->param_groups().front().options(), "weight_decay"), 0.0)
        << "the epoch schedule did not reach its end with the run";
  });
}

// Without resharding, another world size or mode is refused, naming what to pass.
TEST(ReshardingTest, AnotherWorldSizeOrModeIsRefusedWithoutReshardingNamingTheFlag) {
  test::TempDir dir;
  const Json config = run_config("zero3", dir.file("c"));
  test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) { Trainer(config, {}, {}, communicator).fit(); });
  const std::string path = dir.file("c/" + checkpoint_file_name(3));
  const StateDict whole = consolidate_checkpoint(path);
  Json elsewhere = run_config("zero3", "");
  test::run_ranks(3, [&](int, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(elsewhere, {}, {}, communicator);
    try {
      trainer.resume(whole);
      ADD_FAILURE() << "a 2-rank checkpoint resumed on 3 ranks without resharding";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find("--reshard"), std::string::npos) << error.what();
    }
  });
  elsewhere["parallel"]["mode"] = "zero1";
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(elsewhere, {}, {}, communicator);
    try {
      trainer.resume(whole);
      ADD_FAILURE() << "a zero3 checkpoint resumed under zero1 without resharding";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find("parallel.mode"), std::string::npos) << error.what();
    }
    // One rank's file is no whole checkpoint: a zero1 run resumes from the manifest.
    EXPECT_THROW(trainer.resume(read_checkpoint_file(dir.file("c/" + rank_file_name(3, rank))), ResumeOptions{true, true}),
                 CheckpointError);
  });
}

}  // namespace
}  // namespace basin
