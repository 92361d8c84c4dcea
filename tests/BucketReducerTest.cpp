// The data-parallel gradient sync that overlaps backward (BucketReducer),
// ranks as threads: its means against plain LibTorch sums of every rank's
// gradients, buckets started from backward's hooks, once per synced
// backward, in the order gradients arrive; and, through the trainer, the
// same training as the sync after backward.

#include <gtest/gtest.h>

#include <atomic>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/parallel/ddp/bucket_reducer.h"
#include "basin/core/train/trainer.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin {
namespace {

/// Passes every collective on, counting the all-reduces started.
class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  void all_reduce_sum(std::vector<at::Tensor>& t) override { inner_->all_reduce_sum(t); }
  void all_reduce_max(std::vector<at::Tensor>& t) override { inner_->all_reduce_max(t); }
  void broadcast(std::vector<at::Tensor>& t, int root) override { inner_->broadcast(t, root); }
  void reduce_scatter_sum(std::vector<at::Tensor>& parts) override { inner_->reduce_scatter_sum(parts); }
  void barrier() override { inner_->barrier(); }
  std::unique_ptr<PendingCollective> start_all_gather(std::vector<std::vector<at::Tensor>> pieces) override {
    return inner_->start_all_gather(std::move(pieces));
  }
  std::unique_ptr<PendingCollective> start_all_reduce_sum(at::Tensor tensor) override {
    ++started;
    return inner_->start_all_reduce_sum(std::move(tensor));
  }
  std::atomic<int64_t> started{0};

 private:
  std::shared_ptr<Communicator> inner_;
};

/// A three-layer MLP as plain tensors [w1, b1, w2, b2, w3, b3], the same on
/// every rank (its own generator: ranks are threads sharing the global one).
std::vector<at::Tensor> mlp_parameters() {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  std::vector<at::Tensor> params;
  const std::vector<std::pair<int64_t, int64_t>> shapes{{12, 8}, {10, 12}, {3, 10}};
  for (const auto& [out, in] : shapes) {
    params.push_back(at::randn({out, in}, generator).mul_(0.5).requires_grad_());
    params.push_back(at::randn({out}, generator).mul_(0.1).requires_grad_());
  }
  return params;
}

/// `uses[i]` false: layer i's bias is left out of the forward.
at::Tensor mlp_loss(const std::vector<at::Tensor>& p, int rank, int microbatch, std::vector<bool> uses = {}) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(100 + 10 * rank + microbatch);
  at::Tensor h = at::randn({6, 8}, generator);
  for (std::size_t layer = 0; layer < 3; ++layer) {
    h = at::matmul(h, p[2 * layer].t());
    if (uses.empty() || uses[layer]) h = h + p[2 * layer + 1];
    if (layer < 2) h = at::tanh(h);
  }
  return h.square().mean();
}

/// Each rank's own gradients of its loss, from plain autograd on a fresh copy.
std::vector<at::Tensor> local_gradients(int rank, int microbatches = 1) {
  auto params = mlp_parameters();
  for (int m = 0; m < microbatches; ++m) mlp_loss(params, rank, m).backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad().clone());
  return grads;
}

/// b1 used on rank 0 only, b2 on no rank: which layers' biases each rank's forward uses.
const std::vector<std::vector<bool>> kPartlyUsed{{true, false, true}, {false, false, true}};

/// Each rank's own gradients with kPartlyUsed, a zero where it has none.
std::vector<at::Tensor> partly_used_gradients(int rank) {
  auto params = mlp_parameters();
  mlp_loss(params, rank, 0, kPartlyUsed[static_cast<std::size_t>(rank)]).backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
  return grads;
}

BucketReducer::Options tiny_buckets(bool overlap) {
  BucketReducer::Options options;
  options.bucket_bytes = 1;  // every tensor its own bucket
  options.overlap = overlap;
  return options;
}

// Two ranks: each gradient becomes (g0 + g1) / 2, bit for bit (a sum of two
// is the same in any order), whether buckets start in backward or after it.
TEST(BucketReducerTest, GradientsBecomeTheMeanOfTheRanksBitForBit) {
  const std::vector<at::Tensor> g0 = local_gradients(0), g1 = local_gradients(1);
  for (const bool overlap : {true, false}) {
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      auto params = mlp_parameters();
      BucketReducer reducer(communicator, params, tiny_buckets(overlap));
      for (int step = 0; step < 2; ++step) {  // the second after the buckets' rebuild
        for (auto& p : params) p.mutable_grad() = at::Tensor();
        reducer.prepare_for_backward();
        mlp_loss(params, rank, 0).backward();
        reducer.finish_backward();
        for (std::size_t i = 0; i < params.size(); ++i) {
          EXPECT_TRUE(at::equal(params[i].grad(), (g0[i] + g1[i]) / 2.0))
              << "overlap " << overlap << ", step " << step << ", tensor " << i;
        }
        // From hooks, every bucket went out before backward returned; without, none did.
        EXPECT_EQ(reducer.started_during_backward(), overlap ? 6 : 0);
      }
      // DDP keeps its buffers: every gradient once more, and a flag per tensor.
      int64_t bytes = 4 * static_cast<int64_t>(params.size());
      for (const auto& p : params) bytes += p.numel() * 4;
      EXPECT_EQ(reducer.buffer_bytes(), bytes);
    });
  }
}

// After a synced backward the gradients are views of their bucket (one
// bucket here): zeroed in place, the next backward accumulates straight into
// it, and the means stay bit for bit those of plain LibTorch.
TEST(BucketReducerTest, GradientsBecomeViewsOfTheirBucketAndStayExact) {
  const std::vector<at::Tensor> g0 = local_gradients(0), g1 = local_gradients(1);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    auto params = mlp_parameters();
    BucketReducer reducer(communicator, params, BucketReducer::Options{});
    for (int step = 0; step < 3; ++step) {
      std::vector<const void*> before;
      for (auto& p : params) {
        if (p.grad().defined()) p.mutable_grad().zero_();  // as zero_grad() without set_to_none
        before.push_back(p.grad().defined() ? p.grad().data_ptr() : nullptr);
      }
      reducer.prepare_for_backward();
      mlp_loss(params, rank, 0).backward();
      reducer.finish_backward();
      // From the step after the rebuild on, backward wrote into the bucket itself: no gradient moved.
      for (std::size_t i = 0; step == 2 && i < params.size(); ++i) EXPECT_EQ(params[i].grad().data_ptr(), before[i]) << i;
      for (std::size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(at::equal(params[i].grad(), (g0[i] + g1[i]) / 2.0)) << "step " << step << ", tensor " << i;
        EXPECT_TRUE(params[i].grad().storage().is_alias_of(params[0].grad().storage())) << "step " << step << ", " << i;
      }
    }
  });
}

// Microbatches accumulate locally; the synced backward (the last) starts
// each bucket once, and the mean is of the accumulated gradients.
TEST(BucketReducerTest, MicrobatchesSyncOnceWithTheAccumulatedGradients) {
  const std::vector<at::Tensor> g0 = local_gradients(0, 3), g1 = local_gradients(1, 3);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> inner) {
    auto communicator = std::make_shared<CountingCommunicator>(inner);
    auto params = mlp_parameters();
    BucketReducer reducer(communicator, params, tiny_buckets(true));
    for (int m = 0; m < 3; ++m) {
      if (m == 2) reducer.prepare_for_backward();
      mlp_loss(params, rank, m).backward();
      if (m < 2) {
        EXPECT_EQ(communicator->started.load(), 0) << "microbatch " << m;
      }
    }
    reducer.finish_backward();
    EXPECT_EQ(communicator->started.load(), static_cast<int64_t>(reducer.buckets().size()));
    for (std::size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(at::equal(params[i].grad(), (g0[i] + g1[i]) / 2.0)) << i;
  });
}

// Parameter 1 (b1) is used on rank 0 only and parameter 3 (b2) on no rank:
// b1 counts as zero on rank 1, b2 keeps no gradient, and the buckets after
// b1's wait for it without mixing the order up across ranks.
TEST(BucketReducerTest, AParameterUsedOnOneRankCountsAsZeroAndOneUsedNowhereStaysWithout) {
  const auto g0 = partly_used_gradients(0), g1 = partly_used_gradients(1);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    auto params = mlp_parameters();
    BucketReducer reducer(communicator, params, tiny_buckets(true));
    for (int step = 0; step < 2; ++step) {  // the second after the buckets' rebuild
      for (auto& p : params) p.mutable_grad() = at::Tensor();
      reducer.prepare_for_backward();
      mlp_loss(params, rank, 0, kPartlyUsed[static_cast<std::size_t>(rank)]).backward();
      reducer.finish_backward();
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (i == 3) {
          EXPECT_FALSE(params[i].grad().defined()) << "step " << step;
          continue;
        }
        ASSERT_TRUE(params[i].grad().defined()) << "step " << step << ", tensor " << i;
        EXPECT_TRUE(at::equal(params[i].grad(), (g0[i] + g1[i]) / 2.0)) << "step " << step << ", tensor " << i;
      }
    }
  });
}

// ZeRO-2: with owners, each rank ends with the means of the gradients it
// owns (bit for bit at two ranks), none of the others', and of the buckets
// only its own parts; b1 (rank 0 uses it) counts as zero on rank 1 and b2 (no rank
// uses it) keeps no gradient on its owner, before and after the rebuild.
TEST(BucketReducerTest, ToOwnersEachRankKeepsTheMeansItOwnsAndNothingElse) {
  const auto g0 = partly_used_gradients(0), g1 = partly_used_gradients(1);
  const std::vector<int> owners{0, 1, 1, 0, 0, 1};
  // Gradients set to none before each backward (LibTorch 2.x's zero_grad),
  // or zeroed in place (1.13's), so that a rank's own ones accumulate in its part.
  for (const bool tiny : {true, false}) {
    for (const bool zeroed : {false, true}) {
      test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
        auto params = mlp_parameters();
        BucketReducer::Options options = tiny_buckets(true);
        if (!tiny) options = BucketReducer::Options{};  // every tensor in the first bucket
        options.owners = owners;
        BucketReducer reducer(communicator, params, options);
        for (int step = 0; step < 3; ++step) {
          std::vector<const void*> before;
          for (auto& p : params) {
            if (!zeroed) p.mutable_grad() = at::Tensor();
            if (zeroed && p.grad().defined()) p.mutable_grad().zero_();
            before.push_back(p.grad().defined() ? p.grad().data_ptr() : nullptr);
          }
          reducer.prepare_for_backward();
          mlp_loss(params, rank, 0, kPartlyUsed[static_cast<std::size_t>(rank)]).backward();
          reducer.finish_backward();
          // What this rank keeps of the buckets is its own parts, where its gradients live: its tensors and flags.
          int64_t own_bytes = 0;
          for (std::size_t i = 0; i < params.size(); ++i) own_bytes += owners[i] == rank ? params[i].numel() * 4 + 4 : 0;
          if (step >= 1) {  // the first step's rebuild laid the buckets out anew
            EXPECT_EQ(reducer.buffer_bytes(), own_bytes);
          }
          for (std::size_t i = 0; i < params.size(); ++i) {
            const std::string where = "tiny " + std::to_string(tiny) + ", zeroed " + std::to_string(zeroed) + ", step " + std::to_string(step) +
                                      ", rank " + std::to_string(rank) + ", tensor " + std::to_string(i);
            if (owners[i] != rank || i == 3) {
              EXPECT_FALSE(params[i].grad().defined()) << where;
              continue;
            }
            ASSERT_TRUE(params[i].grad().defined()) << where;
            EXPECT_TRUE(at::equal(params[i].grad(), (g0[i] + g1[i]) / 2.0)) << where;
            // Zeroed in place after the rebuild, a rank's own gradient stays where it was, in its part.
            if (zeroed && step == 2) {
              EXPECT_EQ(params[i].grad().data_ptr(), before[i]) << where;
            }
          }
        }
      });
    }
  }
}

// Three ranks, the ring's reduce-scatter: each owner's means match the
// plain sum over ranks (to rounding: the ring adds in its own order).
TEST(BucketReducerTest, ToOwnersOnThreeRanksMatchesTheSumOfEveryRanksGradients) {
  const std::vector<std::vector<at::Tensor>> local{local_gradients(0), local_gradients(1), local_gradients(2)};
  const std::vector<int> owners{2, 0, 1, 1, 0, 2};
  test::run_ranks(3, [&](int rank, std::shared_ptr<Communicator> communicator) {
    auto params = mlp_parameters();
    BucketReducer::Options options = tiny_buckets(true);
    options.bucket_bytes = 200;  // a few tensors a bucket, of several owners
    options.owners = owners;
    BucketReducer reducer(communicator, params, options);
    reducer.prepare_for_backward();
    mlp_loss(params, rank, 0).backward();
    reducer.finish_backward();
    EXPECT_EQ(reducer.started_during_backward(), static_cast<int64_t>(reducer.buckets().size()));
    EXPECT_GT(reducer.buckets().size(), 1u);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (owners[i] != rank) {
        EXPECT_FALSE(params[i].grad().defined()) << i;
        continue;
      }
      const at::Tensor mean = (local[0][i] + local[1][i] + local[2][i]) / 3.0;
      EXPECT_TRUE(at::allclose(params[i].grad(), mean, 1e-6, 1e-7)) << "rank " << rank << ", tensor " << i;
    }
  });
}

// Parameters listed in the reverse of their use arrive in their list order:
// after the first synced backward, buckets follow that arrival, so each
// starts as soon as backward has produced it; without overlap alike.
TEST(BucketReducerTest, BucketsAreRebuiltInTheOrderGradientsArrive) {
  for (const bool overlap : {true, false}) {
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      auto forward_order = mlp_parameters();
      // Listed last layer first: [w3, b3, w2, b2, w1, b1].
      std::vector<at::Tensor> params{forward_order[4], forward_order[5], forward_order[2],
                                     forward_order[3], forward_order[0], forward_order[1]};
      BucketReducer reducer(communicator, params, tiny_buckets(overlap));
      EXPECT_EQ(reducer.buckets().front(), std::vector<std::size_t>{5});  // at first: the reverse of the list
      for (int step = 0; step < 2; ++step) {
        reducer.prepare_for_backward();
        mlp_loss(forward_order, rank, step).backward();
        reducer.finish_backward();
        for (auto& p : params) p.mutable_grad().zero_();
      }
      const auto buckets = reducer.buckets();
      ASSERT_EQ(buckets.size(), 6u);
      // w3 and b3 arrive first, w1 and b1 last (in some order within a layer).
      EXPECT_LE(std::max(buckets[0][0], buckets[1][0]), 1u) << "overlap " << overlap;
      EXPECT_GE(std::min(buckets[4][0], buckets[5][0]), 4u) << "overlap " << overlap;
    });
  }
}

// Through the trainer: overlapped DDP trains exactly as the sync after
// backward does, bit for bit on 2 and 3 ranks (the same buckets, so the same
// sums), for SGD with microbatches and for SAM with a rank-local and a
// synced ascent, many buckets each.
TEST(BucketReducerTest, OverlappedDataParallelTrainsAsTheSyncAfterBackward) {
  const std::vector<std::pair<int, std::string>> cases{
      {2, "{}"}, {2, R"({"sam": {"sync_ascent": false}})"}, {2, R"({"sam": {"sync_ascent": true}})"},
      {3, "{}"}, {3, R"({"sam": {"sync_ascent": false}})"}, {3, R"({"sam": {"sync_ascent": true}})"}};
  for (const auto& [world, algorithms] : cases) {
    auto train = [&](bool overlap) {
      Json config = test::smoke_config();
      config["max_steps"] = 4;
      config["data"]["microbatches"] = 2;
      config["algorithms"] = Json::parse(algorithms);
      config["parallel"] = {{"mode", "ddp"}, {"timeout_seconds", 60}, {"bucket_mb", 1e-7}, {"overlap", overlap}};
      std::vector<std::vector<at::Tensor>> weights(static_cast<std::size_t>(world));
      test::run_ranks(world, [&](int rank, std::shared_ptr<Communicator> communicator) {
        Trainer trainer(config, {}, {}, communicator);
        trainer.fit();
        for (const auto& p : trainer.model().parameters())
          weights[static_cast<std::size_t>(rank)].push_back(p.detach().clone());
      });
      return weights;
    };
    const auto overlapped = train(true), after = train(false);
    for (std::size_t i = 0; i < after[0].size(); ++i) {
      EXPECT_TRUE(at::equal(overlapped[0][i], after[0][i])) << world << " ranks, " << algorithms << ", tensor " << i;
      for (int rank = 1; rank < world; ++rank) {
        EXPECT_TRUE(at::equal(overlapped[0][i], overlapped[static_cast<std::size_t>(rank)][i]))
            << world << " ranks, " << algorithms << ", tensor " << i;
      }
    }
  }
}

// A rank-local ascent starts no all-reduce in its backward; a synced one
// and every descent start each bucket once, and through the trainer too
// some start before backward has reached the first layer's weight (its
// gradient comes last).
TEST(BucketReducerTest, ARankLocalAscentCommunicatesNothingAndSyncedPassesOverlap) {
  class PassCounter : public Callback {
   public:
    explicit PassCounter(CountingCommunicator& c) : communicator_(c) {}
    std::string name() const override { return "pass_counter"; }
    bool on_before_backward(const State& state, Logger&) override {
      before_ = communicator_.started.load();
      first_weight_ = state.model->parameters().front();
      hook_ = first_weight_.register_hook([this](const at::Tensor&) { at_first_weight_ = communicator_.started.load(); });
      return false;
    }
    bool on_after_backward(const State& state, Logger&) override {
      first_weight_.remove_hook(hook_);
      const bool ascent = state.pass == Pass::kAscent;
      (ascent ? this->ascent : descent).push_back(communicator_.started.load() - before_);
      (ascent ? ascent_in_backward : descent_in_backward).push_back(at_first_weight_ - before_);
      return false;
    }
    std::vector<int64_t> ascent, descent, ascent_in_backward, descent_in_backward;

   private:
    CountingCommunicator& communicator_;
    at::Tensor first_weight_;
    unsigned hook_ = 0;
    int64_t before_ = 0, at_first_weight_ = 0;
  };
  for (const bool synced : {false, true}) {
    Json config = test::smoke_config();
    config["max_steps"] = 2;
    config["algorithms"] = {{"sam", {{"sync_ascent", synced}}}};
    config["parallel"] = {{"mode", "ddp"}, {"timeout_seconds", 60}, {"bucket_mb", 1e-7}};  // a bucket per tensor
    test::run_ranks(2, [&](int, std::shared_ptr<Communicator> inner) {
      auto communicator = std::make_shared<CountingCommunicator>(inner);
      auto counter = std::make_shared<PassCounter>(*communicator);
      Trainer trainer(config, {counter}, {}, communicator);
      trainer.fit();
      const int64_t buckets = static_cast<int64_t>(trainer.model().parameters().size());  // one tensor each
      EXPECT_EQ(counter->ascent, std::vector<int64_t>(2, synced ? buckets : 0));
      EXPECT_EQ(counter->descent, std::vector<int64_t>(2, buckets));
      for (std::size_t step = 0; step < 2; ++step) {
        EXPECT_GE(counter->descent_in_backward[step], 1) << "step " << step;
        EXPECT_EQ(counter->ascent_in_backward[step] >= 1, synced) << "step " << step;
      }
    });
  }
}

}  // namespace
}  // namespace basin
