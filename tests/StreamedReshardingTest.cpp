// Resharding that never holds the whole checkpoint: a rank of a job at
// another world size reads its rows from the rank files that hold them, a
// tensor at a time, and a rank of a sharded job holds only its rows of a
// whole checkpoint. Pinned against the join-then-cut it replaces, and by
// the memory the process holds while it reads.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/resharding.h"
#include "basin/core/checkpoint/sharded_checkpoint.h"
#include "distributed_util.h"
#include "expect_same_state.h"
#include "test_util.h"

namespace basin {
namespace {

using test::expect_same;

/// The rows layout `rank` of `world_size` would hold of the checkpoint whose rank-0 file is `file`.
RowsLayout layout_of(const StateDict& file, int rank, int world_size) {
  RowsLayout layout;
  const StateDict shards = file.at("shards").toGenericDict();
  for (const auto& name : shards.at("numbering").toListRef()) layout.numbering.push_back(name.toStringRef());
  for (const auto& entry : shards.at("shapes").toGenericDict()) {
    layout.shapes[entry.key().toStringRef()] = entry.value().toIntVector();
  }
  layout.rank = rank;
  layout.world_size = world_size;
  return layout;
}

/// Each per-element tensor of `files` (one rank's each, in rank order),
/// every rank's rows flattened and joined in rank order, by where it lies.
StateDict rows_in_rank_order(const std::vector<StateDict>& files) {
  std::map<std::string, std::vector<at::Tensor>> rows;
  auto add = [&](const std::string& where, const c10::IValue& value) {
    if (value.isTensor() && value.toTensor().dim() > 0) rows[where].push_back(value.toTensor().reshape({-1}));
  };
  auto add_states = [&](const std::string& where, const StateDict& states) {
    for (const auto& entry : states) {
      for (const auto& item : entry.value().toGenericDict()) {
        add(where + "." + std::to_string(entry.key().toInt()) + "." + item.key().toStringRef(), item.value());
      }
    }
  };
  for (const StateDict& file : files) {
    for (const auto& entry : file.at("shards").toGenericDict().at("parameters").toGenericDict()) {
      add("parameter " + entry.key().toStringRef(), entry.value());
    }
    add_states("optimizer", file.at("optimizer").toGenericDict().at("state").toGenericDict());
    add_states("looksam", file.at("algorithms").toGenericDict().at("looksam").toGenericDict().at("parameters").toGenericDict());
  }
  StateDict joined = new_state_dict();
  for (const auto& [where, pieces] : rows) joined.insert(where, at::cat(pieces));
  return joined;
}

// A 3-rank zero3 run (Adam's moments, LookSAM's per-parameter buffers)
// resumed at 1, 2, 4 and 5 ranks: each rank's rows read from the rank
// files equal those cut from the files joined whole, and every rank's
// generators, the loop and the schedulers come along the same.
TEST(StreamedReshardingTest, EachRanksRowsReadFromTheRankFilesEqualThoseCutFromTheWhole) {
  test::TempDir dir;
  Json config = test::smoke_config();
  config["max_steps"] = 3;
  config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  config["algorithms"] = Json::parse(R"({"looksam": {"rho": 0.05, "k": 2, "sync_ascent": true}})");
  config["parallel"] = Json::parse(R"({"mode": "zero3", "timeout_seconds": 60})");
  config["callbacks"] = Json::parse(R"({"checkpoint": {"dir": ")" + dir.file("c") + R"("}})");
  test::run_ranks(3, [&](int, std::shared_ptr<Communicator> communicator) { Trainer(config, {}, {}, communicator).fit(); });
  const std::string path = dir.file("c/" + checkpoint_file_name(3));
  const StateDict manifest = read_checkpoint_file(path);
  const StateDict rank_zero = read_checkpoint_file(rank_files(path, manifest).front());
  const StateDict whole = consolidate_checkpoint(path);
  std::vector<StateDict> saved;  // the 3 ranks' files as written
  for (const std::string& file : rank_files(path, manifest)) saved.push_back(read_checkpoint_file(file));
  for (const int world : {1, 2, 4, 5}) {
    std::vector<StateDict> streamed_ranks;
    for (int rank = 0; rank < world; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(world));
      const RowsLayout layout = layout_of(rank_zero, rank, world);
      const StateDict streamed = reshard_rank_files(path, manifest, layout);
      const StateDict cut = cut_checkpoint(whole, layout);
      const StateDict meta = streamed.at("basin").toGenericDict();
      EXPECT_EQ(meta.at("rank").toInt(), rank);
      EXPECT_EQ(meta.at("world_size").toInt(), world);
      EXPECT_EQ(meta.at("resharded_from").toInt(), 3);
      EXPECT_EQ(saved_world_size(streamed), 3) << "the ranks that wrote it";
      ASSERT_EQ(streamed.size(), cut.size());
      for (const auto& entry : cut) {
        if (entry.key().toStringRef() == "basin") continue;  // the cut of a joined whole says where it was joined from
        ASSERT_TRUE(streamed.contains(entry.key())) << entry.key().toStringRef();
        expect_same(streamed.at(entry.key()), entry.value(), entry.key().toStringRef());
      }
      const StateDict looksam = streamed.at("algorithms").toGenericDict().at("looksam").toGenericDict();
      EXPECT_GT(looksam.at("parameters").toGenericDict().size(), 0u) << "the rule's buffers were resharded too";
      streamed_ranks.push_back(streamed);
    }
    // Apart from the code under test: every row of the saved files, in rank order, is in the new
    // ranks' rows in rank order, for the parameters, Adam's moments and LookSAM's buffers alike.
    expect_same(rows_in_rank_order(streamed_ranks), rows_in_rank_order(saved), "rows at " + std::to_string(world));
  }
}

/// This process's resident memory in KiB now and at its peak (VmRSS and
/// VmHWM: file pages included, as top shows them).
struct Resident {
  int64_t now = -1;
  int64_t peak = -1;
};
Resident resident() {
  std::ifstream status("/proc/self/status");
  Resident kib;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) kib.now = std::stoll(line.substr(6));
    if (line.rfind("VmHWM:", 0) == 0) kib.peak = std::stoll(line.substr(6));
  }
  return kib;
}
/// Starts the peak afresh (Linux: "5" to clear_refs); false where it cannot.
bool reset_peak() { return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5" << std::flush); }

constexpr int64_t kMiB = 1 << 20;
constexpr int kTensors = 8;
constexpr int64_t kTensorBytes = 16 * kMiB;  // each parameter, and its moment as much again: 256 MiB in all

/// A whole checkpoint of 8 parameters of 16 MiB with Adam's first moment.
StateDict large_whole_checkpoint() {
  StateDict model = new_state_dict();
  StateDict state = new_state_dict();
  std::vector<std::string> numbering;
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = "layer" + std::to_string(i) + ".weight";
    model.insert(name, at::full({kTensorBytes / 4 / 1024, 1024}, static_cast<float>(i)));
    StateDict moment = new_state_dict();
    moment.insert("exp_avg", at::full({kTensorBytes / 4 / 1024, 1024}, -static_cast<float>(i)));
    moment.insert("step", at::full({}, 7.0));
    state.insert(static_cast<int64_t>(i), moment);
    numbering.push_back(name);
  }
  StateDict optimizer = new_state_dict();
  optimizer.insert("state", state);
  StateDict meta = new_state_dict();
  meta.insert("format", std::string("basin"));
  meta.insert("world_size", int64_t{1});
  StateDict whole = new_state_dict();
  whole.insert("basin", meta);
  whole.insert("model", model);
  whole.insert("optimizer", optimizer);
  whole.insert("algorithms", new_state_dict());
  c10::impl::GenericList rng(c10::AnyType::get());
  rng.push_back(at::zeros({8}, at::kByte));
  whole.insert("rng", rng);
  return whole;
}

RowsLayout large_layout(int rank, int world_size) {
  RowsLayout layout;
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = "layer" + std::to_string(i) + ".weight";
    layout.numbering.push_back(name);
    layout.shapes[name] = {kTensorBytes / 4 / 1024, 1024};
  }
  layout.rank = rank;
  layout.world_size = world_size;
  return layout;
}

/// What rank 1 of 4 holds of the large checkpoint: a quarter of each tensor, 64 MiB.
void expect_rank_one_of_four(const StateDict& own) {
  const StateDict parameters = own.at("shards").toGenericDict().at("parameters").toGenericDict();
  const StateDict state = own.at("optimizer").toGenericDict().at("state").toGenericDict();
  for (int i = 0; i < kTensors; ++i) {
    const at::Tensor rows = parameters.at("layer" + std::to_string(i) + ".weight").toTensor();
    EXPECT_EQ(rows.size(0), kTensorBytes / 4 / 1024 / 4);
    EXPECT_TRUE(rows.eq(static_cast<float>(i)).all().item<bool>());
    EXPECT_TRUE(state.at(static_cast<int64_t>(i)).toGenericDict().at("exp_avg").toTensor().eq(-static_cast<float>(i)).all().item<bool>());
  }
}

// The memory bound: 64 MiB of rows are the rank's, one tensor's quarter (4 MiB)
// is in flight, and 2 MiB spans round each read out (measured: 69 to 75 MiB
// at the peak). Holding the 256 MiB file, or every page read from it
// (measured: 164 and 131 MiB without handing pages back), breaks it.
constexpr int64_t kBoundKiB = (64 + 32) << 10;

TEST(StreamedReshardingTest, ARankOfAShardedJobHoldsOnlyItsRowsOfAWholeCheckpoint) {
  test::TempDir dir;
  const std::string path = dir.file(checkpoint_file_name(1));
  write_checkpoint_file(path, large_whole_checkpoint());
  if (!reset_peak()) GTEST_SKIP() << "this kernel cannot reset a process's peak memory (/proc/self/clear_refs)";
  const Resident before = resident();
  const StateDict checkpoint = read_checkpoint_file(path);
  EXPECT_LT(resident().now - before.now, 16 << 10) << "KiB held once read: its tensors view the file, unread";
  const StateDict own = checkpoint_for_rank(path, checkpoint, 4, large_layout(1, 4), false);
  const Resident after = resident();
  expect_rank_one_of_four(own);
  EXPECT_LT(after.peak - before.now, kBoundKiB) << "KiB held at the peak beyond the start, reading a 256 MiB file";
  EXPECT_LT(after.now - before.now, kBoundKiB) << "KiB held after";
}

TEST(StreamedReshardingTest, ARankOfAnotherWorldSizeHoldsOnlyItsRowsOfTheRankFiles) {
  test::TempDir dir;
  const std::string path = dir.file(checkpoint_file_name(1));
  {  // a 2-rank sharded checkpoint: each rank's file, then the manifest
    const StateDict whole = large_whole_checkpoint();
    for (int rank = 0; rank < 2; ++rank) {
      const StateDict own = cut_checkpoint(whole, large_layout(rank, 2));
      write_checkpoint_file(dir.file(rank_file_name(1, rank)), own);
      if (rank == 0) write_checkpoint_file(path, sharded_manifest(own, 1, 2));
    }
  }
  malloc_trim(0);  // what making the files took goes back, so the rows read next are counted
  if (!reset_peak()) GTEST_SKIP() << "this kernel cannot reset a process's peak memory (/proc/self/clear_refs)";
  const Resident before = resident();
  const StateDict own = checkpoint_for_rank(path, read_checkpoint_file(path), 4, large_layout(1, 4), true);
  const Resident after = resident();
  expect_rank_one_of_four(own);
  EXPECT_EQ(saved_world_size(own), 2);
  EXPECT_LT(after.peak - before.now, kBoundKiB) << "KiB held at the peak beyond the start, reading 256 MiB of rank files";
  EXPECT_LT(after.now - before.now, kBoundKiB) << "KiB held after";
}

// A checkpoint's tensors view its file copy-on-write: a write stays in the
// process, the file and a second read of it keep what was saved.
TEST(StreamedReshardingTest, WritingATensorReadFromACheckpointLeavesTheFileAsSaved) {
  test::TempDir dir;
  const std::string path = dir.file(checkpoint_file_name(1));
  StateDict saved = new_state_dict();
  saved.insert("weights", at::arange(4096, at::kFloat));
  write_checkpoint_file(path, saved);
  const at::Tensor read = read_checkpoint_file(path).at("weights").toTensor();
  read.mul_(-1);
  EXPECT_EQ(read[5].item<float>(), -5.0f);
  EXPECT_TRUE(at::equal(read_checkpoint_file(path).at("weights").toTensor(), at::arange(4096, at::kFloat)));
  EXPECT_NO_THROW(read_checkpoint_file(path)) << "its sum still holds";
}

}  // namespace
}  // namespace basin
