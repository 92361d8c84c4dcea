// ZeRO-3 (parameters sharded too, FSDP-style), ranks as threads: the same
// training as data parallel for the optimizers and the SAM family, and what
// each rank holds at rest and during a step.

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/callback.h"
#include "basin/core/parallel/fully_sharded_model.h"
#include "basin/core/train/model.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin {
namespace {

using test::max_difference;
using test::sam_config;
using test::train_on_ranks;

/// Trains `config` under ddp and under zero3 on `world` ranks: zero3 follows
/// ddp to 1e-5 and its ranks stay bit-identical.
void expect_zero_three_follows_ddp(Json config, const std::string& what, int world = 2) {
  config["parallel"]["mode"] = "ddp";
  const auto replicated = train_on_ranks(world, config);
  config["parallel"]["mode"] = "zero3";
  const auto sharded = train_on_ranks(world, config);
  EXPECT_LE(max_difference(sharded[0], replicated[0]), 1e-5) << what;
  for (int r = 1; r < world; ++r) EXPECT_EQ(max_difference(sharded[0], sharded[static_cast<std::size_t>(r)]), 0.0) << what;
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

}  // namespace
}  // namespace basin
