// Gradient sync across ranks (ranks as threads): parameters without a
// gradient (LibTorch 2.x's zero_grad leaves them undefined; an unused
// branch never gets one) in every mode and every reader of gradients, and
// ZeRO-1's reduce to owners, which moves the bytes of data-parallel SGD.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/nn/modules/linear.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/data/data_pipeline.h"
#include "basin/core/model/model.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin {
namespace {

/// An MLP with a second head, `extra`, that joins the logits only when
/// "use_extra" is set: unset, its parameters get no gradient at all.
///     {"name": "test_gated_mlp", "use_extra": false}
class GatedMLP : public Model {
 public:
  GatedMLP(Params& params, const DatasetInfo& info) : use_extra_(params.boolean("use_extra", false)) {
    int64_t width = 1;
    for (int64_t d : info.input_shape) width *= d;
    hidden_ = register_module("hidden", torch::nn::Linear(width, 16));
    out_ = register_module("out", torch::nn::Linear(16, info.num_classes));
    extra_ = register_module("extra", torch::nn::Linear(16, info.num_classes));
  }
  at::Tensor forward(const at::Tensor& inputs) override {
    const at::Tensor h = at::relu(hidden_->forward(inputs.flatten(1)));
    return use_extra_ ? out_->forward(h) + extra_->forward(h) : out_->forward(h);
  }
  std::vector<at::Tensor> extra_parameters() { return extra_->parameters(); }

 private:
  bool use_extra_;
  torch::nn::Linear hidden_{nullptr}, out_{nullptr}, extra_{nullptr};
};

BASIN_REGISTER(model_registry(), "test_gated_mlp", GatedMLP);

using test::max_difference;
using test::Weights;
using test::weights_of;

/// The head's weights, whole (gathered under zero3: collective then).
Weights extra_of(Trainer& trainer) {
  const auto extra = dynamic_cast<GatedMLP&>(trainer.model()).extra_parameters();
  const auto all = trainer.model().parameters();
  const Weights whole = trainer.whole_parameters();
  Weights out;
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (const auto& p : extra) {
      if (p.is_same(all[i])) out.push_back(whole[i]);
    }
  }
  return out;
}

// SAM with a synced ascent, the grad scaler and clipping: every reader of gradients at once.
Json gated_config(const std::string& mode) {
  Json config = test::smoke_config();
  config["max_steps"] = 4;
  config["model"] = Json::parse(R"({"name": "test_gated_mlp"})");
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05, "sync_ascent": true}})");
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 256, "growth_interval": 1}})");
  config["grad_clip_norm"] = 0.5;
  // A bucket per tensor: a missing gradient holds back the buckets after its own.
  if (mode != "none") {
    config["parallel"] = Json::parse(R"({"mode": ")" + mode + R"(", "timeout_seconds": 60, "bucket_mb": 1e-7})");
  }
  return config;
}

class UnusedParameterTest : public ::testing::TestWithParam<std::string> {};

// A head no rank uses keeps no gradient: it is neither perturbed, nor
// synced, nor counted by the scaler or the clipping, nor stepped.
TEST_P(UnusedParameterTest, HeadNoRankUsesStaysUntouchedAndTrainingMatchesOneProcess) {
  const std::string mode = GetParam();
  const Json config = gated_config(mode);
  Json single = gated_config("none");
  single["data"]["batch_size"] = 32;  // two ranks' 16 together
  Trainer one(single);
  const Weights initial_extra = extra_of(one);
  const FitSummary one_summary = one.fit();
  EXPECT_EQ(one_summary.skipped_steps, 0);
  EXPECT_EQ(max_difference(extra_of(one), initial_extra), 0.0);
  if (mode == "none") return;

  std::vector<Weights> weights(2), extras(2);
  std::vector<int64_t> skipped(2, -1);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    const FitSummary summary = trainer.fit();
    weights[static_cast<std::size_t>(rank)] = weights_of(trainer);
    extras[static_cast<std::size_t>(rank)] = extra_of(trainer);
    skipped[static_cast<std::size_t>(rank)] = summary.skipped_steps;
  });
  EXPECT_EQ(skipped, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(max_difference(extras[0], initial_extra), 0.0);
  EXPECT_EQ(max_difference(weights[0], weights[1]), 0.0);
  EXPECT_LE(max_difference(weights[0], weights_of(one)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Modes, UnusedParameterTest, ::testing::Values("none", "ddp", "zero1", "zero2", "zero3"),
                         [](const auto& info) { return info.param; });

class UsedOnOneRankTest : public ::testing::TestWithParam<std::string> {};

// A head only rank 1 uses: rank 0 counts it as a zero gradient, so the
// collectives line up, replicas stay equal and the head learns from the
// average (half of rank 1's gradient), as PyTorch's DDP does.
TEST_P(UsedOnOneRankTest, CountsAsZeroOnTheOtherRank) {
  Json config = gated_config(GetParam());
  config["algorithms"] = Json::object();
  config.erase("callbacks");
  config.erase("grad_clip_norm");
  config["optimizer"] = Json::parse(R"({"name": "sgd", "lr": 0.1})");
  config["max_steps"] = 1;
  std::vector<Weights> extras(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Json mine = config;
    mine["model"]["use_extra"] = rank == 1;
    Trainer trainer(mine, {}, {}, communicator);
    trainer.fit();
    extras[static_cast<std::size_t>(rank)] = extra_of(trainer);
  });
  EXPECT_EQ(max_difference(extras[0], extras[1]), 0.0);

  // Reference in plain LibTorch: the same initial weights, rank 1's slice of
  // the first batch, and w - lr * g / 2 for the head.
  Json reference = config;
  reference.erase("parallel");
  reference["model"]["use_extra"] = true;
  Trainer same_start(reference);
  const auto order = epoch_order(same_start.data().train.size(), 3, 0, true);  // smoke_config's seed
  const Batch batch = same_start.data().train.gather(std::vector<int64_t>(order.begin() + 16, order.begin() + 32));
  at::cross_entropy_loss(same_start.model().forward(batch.inputs), batch.targets).backward();
  auto head = dynamic_cast<GatedMLP&>(same_start.model()).extra_parameters();
  ASSERT_EQ(head.size(), extras[1].size());
  for (std::size_t i = 0; i < head.size(); ++i) {
    const at::Tensor expected = head[i].detach() - 0.1 * head[i].grad() / 2;
    EXPECT_TRUE(at::allclose(extras[1][i], expected, 1e-6, 1e-7))
        << "extra tensor " << i << " max diff " << (extras[1][i] - expected).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, UsedOnOneRankTest, ::testing::Values("ddp", "zero1", "zero2", "zero3"),
                         [](const auto& info) { return info.param; });

// Bytes per step as the communicator counts them (the ring model): ZeRO-1
// with SAM's rank-local ascent reduces each shard to its owner and broadcasts
// it back, which is what one all-reduce of every gradient costs.
// Counted from the first step's end on: the first synced backward also
// agrees once on the order of DDP's buckets.
class BytesAtStepEnds : public Callback {
 public:
  explicit BytesAtStepEnds(const Communicator& communicator) : communicator_(communicator) {}
  std::string name() const override { return "bytes_at_step_ends"; }
  bool on_batch_end(const State&, Logger&) override { return bytes.push_back(communicator_.bytes_moved()), false; }
  std::vector<double> bytes;

 private:
  const Communicator& communicator_;
};

TEST(GradientSyncTest, ZeroOneRankLocalSamMovesTheBytesOfDataParallelSgd) {
  auto bytes_per_step = [](const Json& config) {
    double per_step = 0;
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      auto counter = std::make_shared<BytesAtStepEnds>(*communicator);
      Trainer trainer(config, {counter}, {}, communicator);
      trainer.fit();
      const auto& b = counter->bytes;
      if (rank == 0) per_step = (b.back() - b.front()) / static_cast<double>(b.size() - 1);
    });
    return per_step;
  };
  Json ddp_sgd = test::smoke_config();
  ddp_sgd["max_steps"] = 4;
  ddp_sgd["parallel"] = Json::parse(R"({"mode": "ddp", "timeout_seconds": 60})");
  // Gradient and parameter traffic alone: no per-pass agreement on the loss being finite.
  ddp_sgd["nonfinite_loss"] = Json::parse(R"({"skip": false})");
  Json zero_sam = ddp_sgd;
  zero_sam["parallel"]["mode"] = "zero1";
  zero_sam["algorithms"] = Json::parse(R"({"sam": {"sync_ascent": false}})");
  Json zero_sgd = ddp_sgd;
  zero_sgd["parallel"]["mode"] = "zero1";
  Json ddp_synced_sam = ddp_sgd;
  ddp_synced_sam["algorithms"] = Json::parse(R"({"sam": {"sync_ascent": true}})");

  int64_t parameter_bytes = 0, tensors = 0;
  {
    Trainer probe(test::smoke_config());
    for (const auto& p : probe.model().parameters()) parameter_bytes += p.numel() * 4, ++tensors;
  }
  // Which gradients exist anywhere: DDP's flags ride in its last bucket (a
  // float per tensor, all-reduced); ZeRO-1 all-reduces a byte per tensor.
  const double ddp_flags = 4.0 * static_cast<double>(tensors), zero_mask = static_cast<double>(tensors);
  const double ddp = bytes_per_step(ddp_sgd);
  // Two ranks: an all-reduce of S sends S per rank; the rest is the stop flags and the gradient flags.
  EXPECT_GE(ddp, static_cast<double>(parameter_bytes) + ddp_flags);
  EXPECT_LE(ddp, static_cast<double>(parameter_bytes) + ddp_flags + 64);
  EXPECT_NEAR((bytes_per_step(zero_sam) - zero_mask) / (ddp - ddp_flags), 1.0, 1e-9);
  EXPECT_NEAR((bytes_per_step(zero_sgd) - zero_mask) / (ddp - ddp_flags), 1.0, 1e-9);
  EXPECT_NEAR(bytes_per_step(ddp_synced_sam) / ddp, 2.0, 0.01);
  // ZeRO-2: each pass's reduce-scatter (the flags riding in the last
  // bucket's parts, half of DDP's flag bytes at two ranks) and the owners'
  // all-gather, what one all-reduce costs; the synced ascent moves twice that.
  Json zero2_sgd = zero_sgd, zero2_synced_sam = ddp_synced_sam;
  zero2_sgd["parallel"]["mode"] = "zero2";
  zero2_synced_sam["parallel"]["mode"] = "zero2";
  EXPECT_NEAR((bytes_per_step(zero2_sgd) - ddp_flags / 2) / (ddp - ddp_flags), 1.0, 1e-9);
  EXPECT_NEAR((bytes_per_step(zero2_synced_sam) - ddp_flags) / (ddp - ddp_flags), 2.0, 0.01);
}

// Two and three ranks, parts of 5, 0 and 3 elements, then parts that travel
// in several chunks (8 MiB of floats each: 2 chunks and 5 elements, 7
// elements, exactly one chunk): each rank ends with the sum of its own part
// over ranks (the ring passes every part around once).
TEST(GradientSyncTest, ReduceScatterOfUnevenPartsSumsEachPartOntoItsRank) {
  const int64_t chunk = (8 << 20) / 4;
  auto contribution = [](int from, int part, int64_t size) {  // exact in fp32 whatever the order of the sums
    return at::remainder(at::arange(size, at::kFloat), 1000.0) * (part + 1) + 100.0 * from;
  };
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{5, 0, 3}, {2 * chunk + 5, 7, chunk}}) {
    for (int world : {2, 3}) {
      test::run_ranks(world, [&](int rank, std::shared_ptr<Communicator> communicator) {
        for (int call = 0; call < 2; ++call) {  // back to back: the rounds' tags repeat across calls
          std::vector<at::Tensor> parts;
          for (int part = 0; part < world; ++part) {
            parts.push_back(contribution(rank, part, sizes[static_cast<std::size_t>(part)]) * (call + 1));
          }
          communicator->reduce_scatter_sum(parts);
          at::Tensor expected = at::zeros({sizes[static_cast<std::size_t>(rank)]});
          for (int from = 0; from < world; ++from) {
            expected += contribution(from, rank, sizes[static_cast<std::size_t>(rank)]) * (call + 1);
          }
          const int64_t size = sizes[static_cast<std::size_t>(rank)];
          EXPECT_TRUE(at::equal(parts[static_cast<std::size_t>(rank)], expected))
              << "world " << world << " rank " << rank << " call " << call << " part of " << size;
        }
      });
    }
  }
}

// A process group that only watches how many threads are inside its calls at
// once; each call stays inside for 2 ms, so threads issuing unserialized overlap.
class OverlapWatchingGroup : public compat::CollectiveBackend {
 public:
  OverlapWatchingGroup() : compat::CollectiveBackend(/*rank=*/0, /*size=*/2) {}
  const std::string getBackendName() const override { return "overlap-watching"; }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>&, const c10d::BroadcastOptions&) override {
    return enter();
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&, const c10d::AllreduceOptions&) override {
    return enter();
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>&, const c10d::ReduceOptions&) override {
    return enter();
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override { return enter(); }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>&, int, int) override { return enter(); }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>&, int, int) override { return enter(); }

  int most_inside() const { return most_inside_; }
  int calls() const { return calls_; }

 private:
  struct DoneWork : c10d::Work {
    bool wait(std::chrono::milliseconds) override { return true; }
  };
  c10::intrusive_ptr<c10d::Work> enter() {
    const int now = ++inside_;
    int most = most_inside_;
    while (now > most && !most_inside_.compare_exchange_weak(most, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --inside_;
    ++calls_;
    return c10::make_intrusive<DoneWork>();
  }
  std::atomic<int> inside_{0}, most_inside_{0}, calls_{0};
};

// Four threads, released together, each running every collective of one
// communicator per kind over that group: Gloo's are issued one thread at a
// time (issue 19), NCCL's are not (its first collective may wait for peers).
TEST(GradientSyncTest, GlooIssuesOneThreadAtATimeAndNcclDoesNot) {
  for (const auto kind : {ProcessGroupKind::kGloo, ProcessGroupKind::kNccl}) {
    auto group = c10::make_intrusive<OverlapWatchingGroup>();
    constexpr int kThreads = 4;
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        auto communicator = make_process_group_communicator(group, kind);
        std::vector<at::Tensor> tensors{at::ones({2})}, parts{at::ones({1}), at::ones({1})};
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        communicator->all_reduce_sum(tensors);
        communicator->all_reduce_max(tensors);
        communicator->broadcast(tensors, 0);
        communicator->reduce_scatter_sum(parts);  // Gloo: a send and a receive; NCCL: a reduce per part
        communicator->barrier();
      });
    }
    for (auto& thread : threads) thread.join();
    const bool gloo = kind == ProcessGroupKind::kGloo;
    EXPECT_EQ(group->calls(), kThreads * 6) << (gloo ? "gloo" : "nccl");  // 2 all-reduces, 1 broadcast, 2, 1 barrier
    if (gloo) {
      EXPECT_EQ(group->most_inside(), 1);
    } else {
      EXPECT_GT(group->most_inside(), 1);
    }
  }
}

// Ranks as threads, each round a fresh group per rank, the threads released
// together onto their first collectives: LibTorch 2.x's flight recorder
// registers each new group in a process-wide map outside its lock, which
// crashed this binary (issue 19) until the communicator issued one thread at
// a time. Every kind of collective the communicator has, checked by value.
TEST(GradientSyncTest, FreshGroupsOnThreadsIssueTheirFirstCollectivesTogether) {
  constexpr int kWorld = 2, kRounds = 60;
  const double total = kWorld * (kWorld + 1) / 2.0;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> ready{0};
    test::run_ranks(kWorld, [&](int rank, std::shared_ptr<Communicator> communicator) {
      std::vector<at::Tensor> sum, max{at::full({4}, rank + 1.0)}, copied{at::full({4}, rank + 1.0)}, parts;
      for (int i = 0; i < 4; ++i) sum.push_back(at::full({4}, rank + 1.0));
      for (int part = 0; part < kWorld; ++part) parts.push_back(at::full({2}, rank + 1.0));
      ready.fetch_add(1);
      while (ready.load() < kWorld) {  // spin, so that no thread starts ahead
      }
      communicator->all_reduce_sum(sum);
      communicator->all_reduce_max(max);
      communicator->broadcast(copied, kWorld - 1);
      communicator->reduce_scatter_sum(parts);
      communicator->barrier();
      for (const auto& t : sum) EXPECT_TRUE(at::equal(t, at::full({4}, total))) << "round " << round;
      EXPECT_TRUE(at::equal(max.front(), at::full({4}, 1.0 * kWorld))) << "round " << round;
      EXPECT_TRUE(at::equal(copied.front(), at::full({4}, 1.0 * kWorld))) << "round " << round;
      EXPECT_TRUE(at::equal(parts[static_cast<std::size_t>(rank)], at::full({2}, total))) << "round " << round;
    });
  }
}

std::vector<Weights> train_on_two_ranks(const Json& config) {
  std::vector<Weights> weights(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    trainer.fit();
    weights[static_cast<std::size_t>(rank)] = weights_of(trainer);
  });
  return weights;
}

// SGD, not Adam: Adam's update barely depends on the gradient's scale, and
// this test must see the clipping.
TEST(GradientSyncTest, ZeroOnePlainStepsWithClippingEqualDataParallel) {
  Json config = test::smoke_config();
  config["max_steps"] = 4;
  config["parallel"] = Json::parse(R"({"mode": "ddp", "timeout_seconds": 60})");
  const auto unclipped = train_on_two_ranks(config);
  config["grad_clip_norm"] = 0.01;  // far below these gradients' norms
  const auto replicated = train_on_two_ranks(config);
  config["parallel"]["mode"] = "zero1";
  const auto sharded = train_on_two_ranks(config);
  EXPECT_GT(max_difference(replicated[0], unclipped[0]), 1e-3);  // the clipping acted
  EXPECT_EQ(max_difference(sharded[0], sharded[1]), 0.0);
  EXPECT_LE(max_difference(sharded[0], replicated[0]), 1e-6);
}

// Gloo moves CUDA tensors through host memory in its collectives but not in
// its sends: ZeRO-1's reduce-scatter must still work for a CUDA job on Gloo.
TEST(GradientSyncTest, ZeroOneOverGlooWithCudaTensors) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: this runs on a GPU machine";
  Json config = gated_config("zero1");
  config["device"] = "cuda";
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05, "sync_ascent": false}})");
  const auto sharded = train_on_two_ranks(config);
  config["parallel"]["mode"] = "ddp";
  const auto replicated = train_on_two_ranks(config);
  EXPECT_EQ(max_difference(sharded[0], sharded[1]), 0.0);
  EXPECT_LE(max_difference(sharded[0], replicated[0]), 1e-5);
}

}  // namespace
}  // namespace basin
