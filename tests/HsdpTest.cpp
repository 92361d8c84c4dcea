// HSDP ("parallel.mode": "hsdp"), ranks as threads: zero3 within groups of
// shard_group_size consecutive ranks, the groups replicas of each other.
// The same training as data parallel on all the ranks; the communicator's
// groups it is built on; its checkpoint's layout; its key's errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/base/checkpoint_error.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/config/config_error.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "distributed_util.h"
#include "local_gradients.h"
#include "precision_bounds.h"
#include "test_util.h"
#include "zero_three_follows_ddp.h"

namespace basin {
namespace {

using test::expect_zero_three_follows_ddp;
using test::sam_config;

Json hsdp_config(int shard_group_size) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "hsdp");
  config["parallel"]["shard_group_size"] = shard_group_size;
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  return config;
}

/// What building a Trainer from `config` on each of `ranks` ranks throws (ConfigError's words, one a rank).
std::vector<std::string> config_errors_on_ranks(int ranks, const Json& config) {
  std::mutex lock;
  std::vector<std::string> messages;
  test::run_ranks(ranks, [&](int, std::shared_ptr<Communicator> communicator) {
    const std::string said = test::config_error_of([&] { Trainer trainer(config, {}, {}, communicator); });
    std::lock_guard<std::mutex> hold(lock);
    messages.push_back(said);
  });
  return messages;
}

// A split makes a group of the ranks of each color, ranked in the job's
// order; a second split makes groups of their own, and collectives in a
// group sum over its ranks alone while the job's go on over all.
TEST(HsdpTest, ACommunicatorSplitsIntoAGroupPerColorRankedInTheJobsOrder) {
  std::vector<std::vector<double>> sums(4);
  test::run_ranks(4, [&](int rank, std::shared_ptr<Communicator> job) {
    const auto shards = job->split({0, 0, 1, 1});    // {0, 1}, {2, 3}
    const auto replicas = job->split({5, 7, 5, 7});  // {0, 2}, {1, 3}
    EXPECT_EQ(shards->world_size(), 2);
    EXPECT_EQ(shards->rank(), rank % 2);
    EXPECT_EQ(replicas->world_size(), 2);
    EXPECT_EQ(replicas->rank(), rank / 2);
    std::vector<at::Tensor> in_shards{at::full({1}, static_cast<double>(rank), at::kDouble)};
    shards->all_reduce_sum(in_shards);
    std::vector<at::Tensor> in_replicas{at::full({1}, static_cast<double>(rank), at::kDouble)};
    replicas->all_reduce_sum(in_replicas);
    std::vector<at::Tensor> in_job{at::full({1}, static_cast<double>(rank), at::kDouble)};
    job->all_reduce_sum(in_job);
    sums[static_cast<std::size_t>(rank)] = {in_shards[0].item<double>(), in_replicas[0].item<double>(),
                                            in_job[0].item<double>()};
  });
  const std::vector<std::vector<double>> expected = {{1, 2, 6}, {1, 4, 6}, {5, 2, 6}, {5, 4, 6}};
  EXPECT_EQ(sums, expected);
}

// 4 ranks as 2 groups of 2: each rank's shards hold ddp's rows of its place
// in its group, the other group's rank there the same bits; SAM's norm is
// the job's (a norm over one group's rows, or one rank's, would move every
// weight). One group of every rank is zero3; groups of one rank replicate
// every row, as ddp does.
TEST(HsdpTest, GroupsOfTwoOnFourRanksTrainAsDataParallelDoesWithSam) {
  expect_zero_three_follows_ddp(hsdp_config(2), "sam, adam, 2 x 2", 4, 2);
  Json config = hsdp_config(2);
  config["data"]["microbatches"] = 2;
  config["model"] = Json::parse(R"({"name": "mlp", "hidden": [16, 12]})");
  expect_zero_three_follows_ddp(config, "2 microbatches, 2 x 2", 4, 2);
  // Plain SGD steps by the gradient's scale (SAM's ascent and Adam do not): the mean is over all 4 ranks.
  Json sgd = hsdp_config(2);
  sgd["optimizer"] = Json::parse(R"({"name": "sgd", "lr": 0.1})");
  expect_zero_three_follows_ddp(sgd, "sam, plain sgd, 2 x 2", 4, 2);
  sgd["algorithms"] = Json::object();
  expect_zero_three_follows_ddp(sgd, "plain sgd, 2 x 2", 4, 2);
  expect_zero_three_follows_ddp(hsdp_config(1), "groups of 1 rank, 2 of them", 2, 1);
  expect_zero_three_follows_ddp(hsdp_config(3), "one group of 3", 3, 3);
}

// bf16 gathers, a bf16 reduce-scatter within the group and the sum across
// the groups in fp32, against zero3's bf16 reduce-scatter over the 4 ranks:
// the same local gradients, summed in another order and precision.
// One plain-SGD step: each weight within what the two sums' rounding allows
// of the gradients summed (local_gradients.h; a group's mean for the job's
// breaks it many times over). Five steps of SAM and Adam: within what
// Adam's steps allow, whatever the gradients (precision_bounds.h), as a
// bf16 rounding that flips the sign of a near-zero gradient moves Adam's
// step by up to 2 lr on any CPU's kernels; the replicas alike.
TEST(HsdpTest, Bf16GathersAndReduceFollowZeroThreeOnTheSameRanks) {
  Json config = hsdp_config(2);
  config["precision"] = "amp_bf16";
  config["parallel"]["mixed_precision"] = Json::parse(R"({"param_dtype": "bf16", "reduce_dtype": "bf16"})");
  auto as_zero3 = [](Json& c) {
    c["parallel"]["mode"] = "zero3";
    c["parallel"].erase("shard_group_size");
  };
  // hsdp: a bf16 sum of each group's 2 ranks, then an fp32 sum of the 2 groups' sums; zero3: a bf16 ring over 4.
  const double in_groups = test::sum_error_factor(2, test::kBf16);
  const test::ReduceWay grouped_way{"hsdp 2 x 2", [](Json&) {}, in_groups + test::sum_error_factor(2, test::kFp32) * (1 + in_groups)};
  const test::ReduceWay flat_way{"zero3 on 4", as_zero3, test::sum_error_factor(4, test::kBf16)};
  const double used = test::expect_one_step_apart_by_the_reduce_alone(config, 0.1, 4, grouped_way, flat_way, test::kBf16);
  std::cout << "one step: the largest gap is " << used << " of its weight's bound" << std::endl;

  const auto grouped = test::train_and_hold(4, config);
  as_zero3(config);
  const auto flat = test::train_and_hold(4, config);
  const double apart = test::max_difference(grouped[0].whole, flat[0].whole);
  double largest = 0;
  for (const auto* run : {&grouped[0].whole, &flat[0].whole}) {
    for (const auto& w : *run) largest = std::max(largest, w.abs().max().item<double>());
  }
  const double bound = test::adam_runs_apart_bound(config["optimizer"]["lr"].get<double>(), config["max_steps"].get<int64_t>(), largest);
  EXPECT_LE(apart, bound);
  std::cout << "five steps: " << apart << " apart, Adam's bound " << bound << std::endl;
  EXPECT_GT(apart, 0.0) << "the comparison is not of a run with itself";
  for (std::size_t i = 0; i < grouped[2].shards.size(); ++i) {
    EXPECT_TRUE(at::equal(grouped[2].shards[i], grouped[0].shards[i])) << "parameter " << i;
    EXPECT_EQ(grouped[2].shards[i].scalar_type(), at::kFloat) << "the fp32 masters";
  }
}

// Every rank writes its file (its rows, its own random streams); the
// manifest lists them all and says the rows are cut among a group's ranks.
// A run of the same layout resumes from its own file; another group size
// takes resharding, and the refusal names both.
TEST(HsdpTest, EveryRankWritesItsFileAndTheManifestSaysTheGroupSize) {
  test::TempDir dir;
  Json config = hsdp_config(2);
  config["max_steps"] = 2;
  config["callbacks"] = Json{{"checkpoint", {{"every_steps", 2}, {"dir", dir.file("saved")}}}};
  test::run_ranks(4, [&](int, std::shared_ptr<Communicator> communicator) { Trainer(config, {}, {}, communicator).fit(); });
  const std::string path = dir.file("saved/" + checkpoint_file_name(2));
  const StateDict manifest = read_checkpoint_file(path);
  ASSERT_EQ(rank_files(path, manifest).size(), 4u);
  EXPECT_EQ(rows_group_size(path, manifest), 2);
  const auto files = rank_files(path, manifest);
  auto parameters = [&](int r) {
    return read_checkpoint_file(files[static_cast<std::size_t>(r)]).at("shards").toGenericDict().at("parameters").toGenericDict();
  };
  const StateDict first = parameters(0), replica = parameters(2), neighbour = parameters(1);
  for (const auto& item : first) {
    EXPECT_TRUE(at::equal(item.value().toTensor(), replica.at(item.key()).toTensor())) << item.key().toStringRef();
  }
  const std::string weight = "fc0.weight";
  ASSERT_TRUE(first.contains(weight));
  EXPECT_FALSE(at::equal(first.at(weight).toTensor(), neighbour.at(weight).toTensor())) << "rank 1 holds other rows";

  std::mutex lock;
  std::vector<int64_t> resumed_ranks;
  test::run_ranks(4, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    const StateDict own = checkpoint_for_rank(path, manifest, 4, trainer.strategy().rows_layout(), false);
    trainer.resume(own);
    std::lock_guard<std::mutex> hold(lock);
    resumed_ranks.push_back(own.at("basin").toGenericDict().at("rank").toInt() - rank);
  });
  EXPECT_EQ(resumed_ranks, std::vector<int64_t>(4, 0)) << "each rank read its own file";

  config["parallel"]["shard_group_size"] = 4;
  test::run_ranks(4, [&](int, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    std::string message = "(no error)";
    try {
      checkpoint_for_rank(path, manifest, 4, trainer.strategy().rows_layout(), false);
    } catch (const CheckpointError& error) {
      message = error.what();
    }
    EXPECT_NE(message.find("among 2 ranks and this run among 4"), std::string::npos) << message;
    EXPECT_NE(message.find("--reshard"), std::string::npos) << message;
  });
}

TEST(HsdpTest, TheGroupSizeIsRequiredMustDivideTheRanksAndIsHsdpsAlone) {
  Json missing = hsdp_config(2);
  missing["parallel"].erase("shard_group_size");
  std::string message = test::config_error_of([&] { Trainer trainer(missing); });
  EXPECT_NE(message.find("'parallel.shard_group_size' is missing"), std::string::npos) << message;

  Json zero3 = hsdp_config(2);
  zero3["parallel"]["mode"] = "zero3";
  message = test::config_error_of([&] { Trainer trainer(zero3); });
  EXPECT_NE(message.find("'parallel.shard_group_size'"), std::string::npos) << message;
  EXPECT_NE(message.find("\"mode\": \"hsdp\""), std::string::npos) << message;

  for (const int size : {0, -2}) {
    Json bad = hsdp_config(size);
    message = test::config_error_of([&] { Trainer trainer(bad); });
    EXPECT_NE(message.find("parallel.shard_group_size"), std::string::npos) << size << ": " << message;
  }

  for (const auto& said : config_errors_on_ranks(4, hsdp_config(3))) {
    EXPECT_NE(said.find("'parallel.shard_group_size': 3 does not divide the job's 4 ranks"), std::string::npos) << said;
  }
}

// MESA's teacher needs every parameter whole, as under zero3: refused, naming hsdp.
TEST(HsdpTest, MesaIsRefusedNamingItsKeyAndTheMode) {
  Json config = hsdp_config(2);
  config["algorithms"] = Json::parse(R"({"mesa": {}})");
  const std::vector<std::string> messages = config_errors_on_ranks(2, config);
  ASSERT_EQ(messages.size(), 2u);
  for (const auto& said : messages) {
    EXPECT_NE(said.find("'algorithms.mesa'"), std::string::npos) << said;
    EXPECT_NE(said.find("hsdp"), std::string::npos) << said;
  }
}

}  // namespace
}  // namespace basin
