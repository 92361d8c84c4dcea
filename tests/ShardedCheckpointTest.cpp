// ZeRO-3's sharded checkpoints: one file per rank and a manifest, resumed
// rank by rank, refused at another world size, cleaned up after a job that
// died writing one, and joined into one whole file (basin-consolidate's).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/sharded_checkpoint.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/parallel/zero3/fully_sharded_optimizer.h"
#include "distributed_util.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

std::vector<char> pickled(const StateDict& dict) { return torch::jit::pickle_save(dict); }

// Under zero3 each rank writes its own file (its shards, their optimizer
// state, the rules' state of its rows) and rank 0 a manifest; every rank
// resumes from its own file and ends bit for bit where it would have.
TEST(CheckpointTest, ResumedZeroThreeRunFromEachRanksFileEqualsTheUninterruptedRun) {
  for (const char* algorithm : {R"({"sam": {"rho": 0.05}})", R"({"looksam": {"rho": 0.05, "k": 2}})",
                                R"({"friendly_sam": {"rho": 0.05}})"}) {
    SCOPED_TRACE(algorithm);
    test::TempDir dir;
    Json config = test::smoke_config();
    config["parallel"] = Json::parse(R"({"mode": "zero3", "timeout_seconds": 60})");
    config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
    config["algorithms"] = Json::parse(algorithm);
    config["callbacks"] = Json::parse(R"({"checkpoint": {"every_steps": 3, "keep_last": 0, "dir": ")" +
                                      dir.file("checkpoints") + R"("}})");
    const std::string manifest = dir.file("checkpoints/" + checkpoint_file_name(3));
    std::vector<std::vector<char>> uninterrupted(2), continued(2);
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      const auto r = static_cast<std::size_t>(rank);
      Trainer whole(config, {}, {}, communicator);
      whole.fit();
      uninterrupted[r] = pickled(capture_checkpoint(whole.engine()));  // collective
      communicator->barrier();
      Trainer resumed(config, {}, {}, communicator);
      resumed.resume(checkpoint_for_rank(manifest, read_checkpoint_file(manifest), 2, resumed.strategy().rows_layout(), false));
      resumed.fit();
      continued[r] = pickled(capture_checkpoint(resumed.engine()));
    });
    for (std::size_t r = 0; r < 2; ++r) {
      ASSERT_FALSE(uninterrupted[r].empty());
      EXPECT_TRUE(continued[r] == uninterrupted[r]) << "rank " << r << "'s resumed run ended elsewhere";
    }
    const StateDict written = read_checkpoint_file(manifest);
    ASSERT_TRUE(is_sharded_checkpoint(written));
    EXPECT_FALSE(written.contains("model")) << "the manifest holds no weights: each rank's file does";
    for (const auto& file : rank_files(manifest, written)) {
      EXPECT_TRUE(read_checkpoint_file(file).contains("shards")) << file;
    }
  }
}

// A job that died between its ranks' files and rank 0's manifest left rank
// files no manifest names: the next cleanup removes them, but never a newer
// step's (a checkpoint being written) or a kept manifest's.
TEST(CheckpointTest, RankFilesWithoutTheirManifestAreRemovedOnceANewerCheckpointIsComplete) {
  test::TempDir dir;
  auto touch = [&](const std::string& name) { std::ofstream(dir.file(name)) << "x"; };
  touch(checkpoint_file_name(4));
  touch(checkpoint_file_name(4) + ".sum");
  touch(rank_file_name(4, 0));
  touch(rank_file_name(2, 0));  // orphans: step 2's manifest never came
  touch(rank_file_name(2, 1) + ".sum");
  touch(rank_file_name(6, 0));  // newer than every manifest: maybe being written
  remove_old_checkpoints(dir.path().string(), 3);
  EXPECT_FALSE(fs::exists(dir.file(rank_file_name(2, 0))));
  EXPECT_FALSE(fs::exists(dir.file(rank_file_name(2, 1) + ".sum")));
  EXPECT_TRUE(fs::exists(dir.file(rank_file_name(4, 0)))) << "a kept manifest's rank file";
  EXPECT_TRUE(fs::exists(dir.file(rank_file_name(6, 0)))) << "a newer checkpoint's";
  EXPECT_TRUE(fs::exists(dir.file(checkpoint_file_name(4))));
}

TEST(CheckpointTest, AZeroThreeCheckpointIsRefusedAtAnotherWorldSizeNamingBoth) {
  test::TempDir dir;
  Json config = test::smoke_config();
  config["max_steps"] = 2;
  config["parallel"] = Json::parse(R"({"mode": "zero3", "timeout_seconds": 60})");
  config["callbacks"] = Json::parse(R"({"checkpoint": {"dir": ")" + dir.file("c") + R"("}})");
  test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) { Trainer(config, {}, {}, communicator).fit(); });
  const std::string manifest = dir.file("c/" + checkpoint_file_name(2));
  try {
    checkpoint_for_rank(manifest, read_checkpoint_file(manifest), 3, RowsLayout{{}, {}, 0, 3}, false);
    FAIL() << "a 2-rank zero3 checkpoint was handed to a 3-rank job";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("2 ranks and this job has 3"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("basin-consolidate"), std::string::npos) << error.what();
  }
  // What the message points to: basin-consolidate joins it (exit 0), and refuses with exit 2 (bad input,
  // naming the file) an output that is one of its inputs, and a manifest whose rank file is gone.
  auto consolidate = [&](const std::string& output) {
    return test::run_command(std::string(BASIN_CONSOLIDATE_EXE) + " " + manifest + " " + output + " 2>&1");
  };
  const auto joined = consolidate(dir.file("whole.pt"));
  EXPECT_EQ(joined.exit_code, 0) << joined.output;
  EXPECT_TRUE(fs::exists(dir.file("whole.pt"))) << joined.output;
  const auto onto_input = consolidate(dir.file("c/" + rank_file_name(2, 0)));
  EXPECT_EQ(onto_input.exit_code, 2) << onto_input.output;
  EXPECT_NE(onto_input.output.find("one of the files it joins"), std::string::npos) << onto_input.output;
  // A rank file gone: the manifest is no longer a checkpoint to resume from, nor to join.
  fs::remove(dir.file("c/" + rank_file_name(2, 1)));
  EXPECT_THROW(read_latest_checkpoint(dir.file("c")), CheckpointError);
  const auto incomplete = consolidate(dir.file("other.pt"));
  EXPECT_EQ(incomplete.exit_code, 2) << incomplete.output;
  EXPECT_NE(incomplete.output.find(rank_file_name(2, 1)), std::string::npos) << incomplete.output;
  EXPECT_FALSE(fs::exists(dir.file("other.pt"))) << "nothing written from an incomplete checkpoint";
}

// basin-consolidate's join: every parameter whole equals the one the ranks
// gathered at that step, and Adam's moments join to the whole model's shape.
TEST(CheckpointTest, AConsolidatedZeroThreeCheckpointHoldsTheWholeWeightsAndOptimizerState) {
  test::TempDir dir;
  Json config = test::smoke_config();
  config["max_steps"] = 3;
  config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  config["parallel"] = Json::parse(R"({"mode": "zero3", "timeout_seconds": 60})");
  config["callbacks"] = Json::parse(R"({"checkpoint": {"dir": ")" + dir.file("c") + R"("}})");
  std::vector<at::Tensor> whole;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<at::Tensor>> moments(3);  // per rank: exp_avg of each of its shards
  test::run_ranks(3, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    trainer.fit();
    auto gathered = trainer.whole_parameters();  // collective
    auto& local = dynamic_cast<FullyShardedOptimizer&>(*trainer.state().optimizer).local();
    const ParameterNumbering numbering(local);
    const ParameterStates mine = parameter_states(local, numbering);
    for (std::size_t i = 0; i < numbering.parameters().size(); ++i) {
      const auto key = static_cast<int64_t>(i);
      moments[static_cast<std::size_t>(rank)].push_back(
          mine.contains(key) ? mine.at(key).toGenericDict().at("exp_avg").toTensor() : at::Tensor());
    }
    if (rank != 0) return;
    whole = gathered;
    for (const auto& item : trainer.model().named_parameters()) {
      names.push_back(item.key());
      shapes.push_back(item.value().sizes().vec());
    }
  });
  const StateDict joined = consolidate_checkpoint(dir.file("c/" + checkpoint_file_name(3)));
  const StateDict model = joined.at("model").toGenericDict();
  ASSERT_EQ(names.size(), whole.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    ASSERT_TRUE(model.contains(names[i])) << names[i];
    EXPECT_TRUE(at::equal(model.at(names[i]).toTensor(), whole[i])) << names[i];
  }
  EXPECT_TRUE(model.contains("stem_bn.running_mean")) << "the buffers too";
  const StateDict state = joined.at("optimizer").toGenericDict().at("state").toGenericDict();
  ASSERT_EQ(state.size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    const StateDict entry = state.at(static_cast<int64_t>(i)).toGenericDict();
    const at::Tensor joined_moment = entry.at("exp_avg").toTensor();
    ASSERT_EQ(joined_moment.sizes().vec(), shapes[i]) << names[i];
    // The ranks' own rows, in rank order (a rank with no rows of it holds none).
    std::vector<at::Tensor> rows;
    for (const auto& rank : moments) {
      if (rank.at(i).defined() && rank.at(i).numel() > 0) rows.push_back(rank.at(i).reshape({-1}));
    }
    EXPECT_TRUE(at::equal(joined_moment.reshape({-1}), at::cat(rows))) << names[i] << "'s exp_avg";
  }
}

}  // namespace
}  // namespace basin
