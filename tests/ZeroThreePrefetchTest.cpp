// zero3's gather schedule ("parallel.prefetch", "reshard_after_forward"),
// ranks as threads: any schedule gives the same bits; what is whole at once
// and the bytes moved follow the schedule; freed memory is handed back
// before each backward ("return_freed_memory"); steps reuse the blocks of
// the steps before; the keys are zero3's alone.

#include <gtest/gtest.h>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <ATen/ATen.h>

#include "fully_sharded_of.h"
#include "basin/core/base/memory_reuse.h"
#include "basin/core/engine/callback.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/model/model.h"
#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/parallel/zero3/fully_sharded_model.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin {
namespace {

/// What a schedule did on rank 0: the weights, the most bytes held whole at
/// once, the bytes moved by training, and those of one gather of every unit.
struct Scheduled {
  test::Weights weights;
  int64_t peak = 0, at_rest = -1;
  double moved = 0, one_gather = 0;
  std::vector<int64_t> units;  // each unit's bytes, in order
};

Scheduled train(const Json& config) {
  Scheduled out;
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    FullyShardedModel& sharded = *test::fully_sharded_of(trainer);
    sharded.reset_peak();
    const double before = communicator->bytes_moved();
    trainer.fit();
    const double moved = communicator->bytes_moved() - before;
    const int64_t peak = sharded.peak_gathered_bytes(), at_rest = sharded.gathered_bytes();
    const double gathering = communicator->bytes_moved();
    test::Weights weights = test::weights_of(trainer);  // one gather of every unit, from the shards
    if (rank != 0) return;
    out.weights = std::move(weights);
    out.one_gather = communicator->bytes_moved() - gathering;
    out.moved = moved, out.peak = peak, out.at_rest = at_rest;
    for (auto* unit : trainer.model().units()) {
      int64_t bytes = 0;
      for (const auto& p : unit->parameters()) bytes += p.numel() * 4;
      out.units.push_back(bytes);
    }
  });
  return out;
}

/// The mlp (four units, no root) under zero3, SAM with a synced ascent, 3 steps.
Json mlp_job() {
  Json config = test::sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  config["model"] = Json::parse(R"({"name": "mlp", "hidden": [32, 24, 16]})");
  config["max_steps"] = 3;
  config["max_epochs"] = 1;
  return config;
}

/// The gpt's data: 40 numbered lines of `line`, written into `dir`.
Json text_data(const test::TempDir& dir, const std::string& line, int step) {
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += line + std::to_string(i * step) + ".\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  return {{"name", "text"}, {"train", dir.file("corpus.txt")}, {"block_size", 16}, {"batch_size", 8}};
}

/// The gpt (a root unit, a tied table) as mlp_job runs, with bf16 gathers and checkpointing, on text_data.
Json gpt_job(const test::TempDir& dir, const std::string& line, int step) {
  Json gpt = mlp_job();
  gpt["model"] = Json::parse(R"({"name": "gpt", "n_layer": 3, "n_head": 2, "n_embd": 16})");
  gpt["data"] = text_data(dir, line, step);
  gpt["precision"] = "amp_bf16";
  gpt["parallel"]["mixed_precision"] = Json::parse(R"({"param_dtype": "bf16"})");
  gpt["parallel"]["activation_checkpointing"] = true;
  return gpt;
}

// Each gather is issued earlier or later, or not again; the arithmetic is
// the same. Also with a root unit, checkpointing and bf16 gathers (the gpt).
TEST(ZeroThreePrefetchTest, AnySchedulesWeightsAreTheDefaultsBits) {
  test::TempDir dir;
  const Json gpt = gpt_job(dir, "Gathered early, gathered late: ", 11);
  for (const Json& config : {mlp_job(), gpt}) {
    const Scheduled usual = train(config);
    EXPECT_EQ(usual.at_rest, 0);
    for (const char* schedule : {R"({"prefetch": {"forward": 0, "backward": 0}})",
                                 R"({"prefetch": {"forward": 3, "backward": 2}})",
                                 R"({"reshard_after_forward": false})",
                                 R"({"reshard_after_forward": false, "prefetch": {"forward": 0}})"}) {
      Json scheduled = config;
      scheduled["parallel"].update(Json::parse(schedule));
      const Scheduled run = train(scheduled);
      EXPECT_EQ(test::max_difference(run.weights, usual.weights), 0.0) << config["model"] << " " << schedule;
      EXPECT_EQ(run.at_rest, 0) << "nothing whole after training (its evaluation freed every unit): " << schedule;
    }
  }
}

// A unit kept whole by a forward that no backward followed (a loop of your
// own) holds the old values once the optimizer steps the shards, or a
// checkpoint's shards are loaded: either frees it. The gpt's root (the
// position table, the last norm) and its last run (the tied head), whole
// into a backward that never came, too.
TEST(ZeroThreePrefetchTest, AStepOrALoadFreesUnitsAForwardLeftWhole) {
  test::TempDir dir;
  Json mlp = mlp_job();
  mlp["algorithms"] = Json::object();
  mlp["parallel"]["reshard_after_forward"] = false;
  Json gpt = mlp;
  gpt["parallel"].erase("reshard_after_forward");
  gpt["model"] = Json::parse(R"({"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16})");
  gpt["data"] = text_data(dir, "Whole for a backward that never came: ", 7);
  for (const Json& config : {mlp, gpt}) {
    test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) {
      Trainer trainer(config, {}, {}, communicator);
      FullyShardedModel& sharded = *test::fully_sharded_of(trainer);
      const auto inputs = trainer.data().train.gather({0, 1}).inputs;
      at::Tensor out = trainer.model().run(inputs);
      EXPECT_GT(sharded.gathered_bytes(), 0) << config["model"] << ": kept whole for a backward";
      trainer.state().optimizer->step();
      EXPECT_EQ(sharded.gathered_bytes(), 0) << config["model"] << " after a step";
      out = trainer.model().run(inputs);
      ASSERT_GT(sharded.gathered_bytes(), 0);
      const StateDict saved = capture_checkpoint(trainer.engine());
      restore_checkpoint(trainer.engine(), saved);
      EXPECT_EQ(sharded.gathered_bytes(), 0) << config["model"] << " after a load";
    });
  }
}

// Without prefetch a unit is whole alone; each unit prefetched adds one;
// kept whole after forward, every unit is whole at forward's end.
TEST(ZeroThreePrefetchTest, WhatIsWholeAtOnceFollowsTheSchedule) {
  Json config = mlp_job();
  auto peak_of = [&](const char* schedule) {
    Json scheduled = config;
    scheduled["parallel"].update(Json::parse(schedule));
    return train(scheduled);
  };
  const Scheduled alone = peak_of(R"({"prefetch": {"forward": 0, "backward": 0}})");
  const std::vector<int64_t>& u = alone.units;
  ASSERT_EQ(u.size(), 4u);
  EXPECT_EQ(alone.peak, *std::max_element(u.begin(), u.end())) << "one unit whole at a time";
  int64_t pairs = 0, triples = 0;
  for (std::size_t i = 0; i + 1 < u.size(); ++i) pairs = std::max(pairs, u[i] + u[i + 1]);
  for (std::size_t i = 0; i + 2 < u.size(); ++i) triples = std::max(triples, u[i] + u[i + 1] + u[i + 2]);
  const Scheduled one_ahead = peak_of(R"({"prefetch": {"forward": 1, "backward": 1}})");
  EXPECT_GT(one_ahead.peak, alone.peak);
  EXPECT_LE(one_ahead.peak, pairs) << "a unit and the next";
  const Scheduled two_ahead = peak_of(R"({"prefetch": {"forward": 2, "backward": 2}})");
  EXPECT_GT(two_ahead.peak, one_ahead.peak);
  EXPECT_LE(two_ahead.peak, triples);
  const Scheduled kept = peak_of(R"({"reshard_after_forward": false})");
  int64_t all = 0;
  for (const int64_t bytes : u) all += bytes;
  EXPECT_EQ(kept.peak, all) << "every unit whole from its forward to its backward";
}

// Prefetch moves no byte more; a unit kept whole after forward is not
// gathered again for backward: one gather of every unit less per pass, but
// for the last, which no schedule gathers twice (backward begins with it).
TEST(ZeroThreePrefetchTest, KeepingUnitsWholeSavesBackwardsGathersAndPrefetchMovesNothingMore) {
  Json config = mlp_job();
  const Scheduled usual = train(config);
  Json none = config;
  none["parallel"]["prefetch"] = Json::parse(R"({"forward": 0, "backward": 0})");
  EXPECT_EQ(train(none).moved, usual.moved);
  Json kept = config;
  kept["parallel"]["reshard_after_forward"] = false;
  const Scheduled whole = train(kept);
  ASSERT_GT(usual.one_gather, 0);
  const int64_t passes = 3 * 2;  // steps, SAM's two passes
  int64_t all = 0;
  for (const int64_t unit : usual.units) all += unit;
  const double last = usual.one_gather * static_cast<double>(usual.units.back()) / static_cast<double>(all);
  EXPECT_EQ(usual.moved - whole.moved, passes * (usual.one_gather - last));
}

/// Rank 0's first backward: 64 MiB of heap blocks touched and freed just
/// before it (kept for reuse), each between two blocks held, untouched, so
/// that none joins another or the heap's top; and the share of their pages
/// (those wholly inside a block, which a trim may hand back) resident still
/// once backward has run. Asked of those pages alone (mincore), not of the
/// process, whose other threads allocate meanwhile.
class FreedBeforeBackward : public Callback {
 public:
  std::string name() const override { return "freed_before_backward"; }
  bool on_before_backward(const State& state, Logger&) override {
    if (state.rank != 0 || done_) return false;
    for (int i = 0; i < 2 * kBlocks; ++i) {
      void* block = std::malloc(kBlock);
      if (i % 2 == 0) {
        freed_.push_back(std::memset(block, 1, kBlock));
      } else {
        held_.push_back(block);
      }
    }
    for (void* block : freed_) std::free(block);
    return false;
  }
  bool on_after_backward(const State& state, Logger&) override {
    if (state.rank != 0 || done_) return false;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    std::size_t pages = 0, resident = 0;
    for (void* block : freed_) {
      const auto start = (reinterpret_cast<std::uintptr_t>(block) + 2 * page - 1) / page * page;  // past malloc's words
      const auto end = (reinterpret_cast<std::uintptr_t>(block) + kBlock) / page * page;
      std::vector<unsigned char> in(static_cast<std::size_t>((end - start) / page));
      if (::mincore(reinterpret_cast<void*>(start), end - start, in.data()) != 0) continue;
      for (const unsigned char flag : in) resident += flag & 1;
      pages += in.size();
    }
    resident_share = pages > 0 ? static_cast<double>(resident) / static_cast<double>(pages) : -1;
    done_ = true;
    for (void* block : held_) std::free(block);
    return false;
  }
  double resident_share = -1;

 private:
  static constexpr int kBlocks = 512;
  static constexpr std::size_t kBlock = 128 << 10;
  bool done_ = false;
  std::vector<void*> freed_, held_;
};

/// glibc's malloc as basin-train sets it (keep_freed_memory_for_reuse), then its defaults again.
struct FreedMemoryKept {
  FreedMemoryKept() { keep_freed_memory_for_reuse(); }
  ~FreedMemoryKept() {
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
    mallopt(M_TRIM_THRESHOLD, 128 << 10);
  }
};

// The pages a forward freed are resident no more while backward runs (it
// faults in only what it reuses), as basin-train keeps freed memory, with
// parallel.return_freed_memory; without it they stay. The bits are the same.
TEST(ZeroThreePrefetchTest, FreedMemoryIsHandedBackBeforeEachBackward) {
  const FreedMemoryKept kept_as_basin_train_keeps_it;
  std::vector<double> resident;
  std::vector<test::Weights> weights;
  for (const bool handed_back : {true, false}) {
    Json config = mlp_job();
    config["parallel"]["return_freed_memory"] = handed_back;
    auto probe = std::make_shared<FreedBeforeBackward>();
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      Trainer trainer(config, {probe}, {}, communicator);
      trainer.fit();
      test::Weights trained = test::weights_of(trainer);
      if (rank == 0) weights.push_back(std::move(trained));
    });
    resident.push_back(probe->resident_share);
  }
  EXPECT_GE(resident[0], 0);
  EXPECT_LT(resident[0], 0.25) << "of the freed blocks' pages resident through backward, handed back";
  EXPECT_GT(resident[1], 0.75) << "of the freed blocks' pages resident through backward, kept";
  EXPECT_EQ(test::max_difference(weights[0], weights[1]), 0.0);
}

// A unit's gradients are this rank's part of its reduce, in place: one
// storage per unit (the mlp's four), no copy of it beside the part.
TEST(ZeroThreePrefetchTest, AUnitsGradientsAreThisRanksPartOfItsReduce) {
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(mlp_job(), {}, {}, communicator);
    trainer.fit();
    std::vector<const void*> storages;
    for (const at::Tensor& shard : test::fully_sharded_of(trainer)->shards()) {
      ASSERT_TRUE(shard.grad().defined()) << "rank " << rank;
      storages.push_back(shard.grad().storage().data());
    }
    ASSERT_EQ(storages.size(), 8u) << "rank " << rank << ": a weight and a bias a unit";
    std::sort(storages.begin(), storages.end());
    EXPECT_EQ(std::unique(storages.begin(), storages.end()) - storages.begin(), 4) << "rank " << rank;
  });
}

/// Bytes of blocks rank 0's zero3 model has made for reuse, at each step's end.
class CachedBlocks : public Callback {
 public:
  std::string name() const override { return "cached_blocks"; }
  bool on_batch_end(const State& state, Logger&) override {
    if (state.rank == 0) made.push_back(sharded->cached_bytes());
    return false;
  }
  FullyShardedModel* sharded = nullptr;
  std::vector<std::size_t> made;
};

// A step's gathers and reduce parts (its gradients too) take the blocks the
// steps before let go: once settled, the cache makes none, however many
// steps follow. The mlp: four units of four shapes, fp32; the gpt: a root,
// a tied table, bf16 gathers, checkpointing. SAM's two passes a step show
// the first step both of a step's patterns: the gradients let go before a
// backward (LibTorch 2.x's zero_grad), or kept and added to (1.13's).
TEST(ZeroThreePrefetchTest, StepsReuseTheBlocksOfTheStepsBefore) {
  const test::TempDir dir;
  for (Json config : {mlp_job(), gpt_job(dir, "The blocks kept: ", 3)}) {
    config["max_steps"] = 8;
    config["max_epochs"] = 8;
    auto probe = std::make_shared<CachedBlocks>();
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      Trainer trainer(config, {probe}, {}, communicator);
      if (rank == 0) probe->sharded = test::fully_sharded_of(trainer);
      trainer.fit();
    });
    const std::string model = config["model"]["name"];
    ASSERT_EQ(probe->made.size(), 8u) << model;
    EXPECT_GT(probe->made[0], 0u) << model;
    // The gpt's blocks are alike: its first step makes every block. The
    // mlp's units have four shapes; under LibTorch 2.x, where zero_grad lets
    // the gradients go, the bound trades kept blocks between the forward's
    // mix and backward's for a few steps (four here) before the mix settles.
    const std::size_t settled = model == "gpt" ? 0 : 5;
    for (std::size_t step = settled + 1; step < probe->made.size(); ++step) {
      EXPECT_EQ(probe->made[step], probe->made[settled])
          << model << ": bytes made by step " << step + 1 << ", against step " << settled + 1;
    }
  }
}

TEST(ZeroThreePrefetchTest, TheScheduleKeysAreZeroThreesAlone) {
  for (const char* key : {"prefetch", "reshard_after_forward", "return_freed_memory"}) {
    Json config = test::sam_config(R"({"rho": 0.05, "sync_ascent": true})", "ddp");
    config["parallel"][key] = std::string(key) == "prefetch" ? Json::parse(R"({"forward": 0})") : Json(false);
    std::string message;
    try {
      test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) { Trainer trainer(config, {}, {}, communicator); });
    } catch (const ConfigError& error) {
      message = error.what();
    }
    EXPECT_NE(message.find(std::string("parallel.") + key), std::string::npos) << message;
    EXPECT_NE(message.find("\"ddp\""), std::string::npos) << message;
  }
  Json config = mlp_job();
  config["parallel"]["prefetch"] = Json::parse(R"({"forward": -1})");
  const std::string message = test::trainer_config_error(config);
  EXPECT_NE(message.find("parallel.prefetch.forward"), std::string::npos) << message;
}

}  // namespace
}  // namespace basin
