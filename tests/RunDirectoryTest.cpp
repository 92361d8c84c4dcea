// The run directory part (core/checkpoint/run_directory.h): its layout, the
// folder its checkpoints go to (the same as the checkpoint callback's), the
// refusal to overwrite a run, and where a resumed or restarted run starts.
// basin-train's own runs of these paths are in ResumeProgramTest.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "basin/callbacks/checkpoint.h"
#include "basin/core/base/checkpoint_error.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/run_directory.h"
#include "basin/core/config/config.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

/// Sets (or unsets, with nullopt) an environment variable for the scope.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value->c_str(), 1);
    else unsetenv(name);
  }
  ~ScopedVariable() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string checkpoint_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const CheckpointError& error) {
    return error.what();
  }
  ADD_FAILURE() << "no CheckpointError";
  return "";
}

TEST(RunDirectoryTest, CheckpointsGoWhereTheCheckpointCallbackWritesThem) {
  const RunDirectory run("runs/a");
  Json config = Json::object();
  EXPECT_EQ(run.checkpoint_folder(config), "runs/a/checkpoints");
  config["callbacks"]["checkpoint"]["dir"] = "saved";
  EXPECT_EQ(run.checkpoint_folder(config), "runs/a/saved");
  config["callbacks"]["checkpoint"]["dir"] = "/shared/saved";
  EXPECT_EQ(run.checkpoint_folder(config), "/shared/saved");
  EXPECT_EQ(RunDirectory("").checkpoint_folder(Json::object()), "checkpoints");
  EXPECT_EQ(run.file(RunDirectory::kSummary), "runs/a/summary.json");
  for (const char* dir : {"saved", "/shared/saved"}) {
    Params params(Json{{"dir", dir}}, "callbacks.checkpoint");
    Json with_dir = Json::object();
    with_dir["callbacks"]["checkpoint"]["dir"] = dir;
    EXPECT_EQ(CheckpointSaver(params).folder("runs/a"), run.checkpoint_folder(with_dir)) << dir;
  }
  Params defaults(Json::object(), "callbacks.checkpoint");
  EXPECT_EQ(CheckpointSaver(defaults).folder("runs/a"), run.checkpoint_folder(Json::object()));
}

TEST(RunDirectoryTest, AFolderHoldingARunIsRefusedUnlessOverwriteSaysSo) {
  test::TempDir dir;
  const RunDirectory run(dir.file("run"));
  EXPECT_NO_THROW(run.check_unused(false)) << "a folder that does not exist yet";
  run.write_json(RunDirectory::kConfig, Json{{"seed", 1}});
  EXPECT_EQ(Json::parse(test::read_text(run.file(RunDirectory::kConfig)))["seed"], 1);
  EXPECT_NO_THROW(run.check_unused(false)) << "a config alone is no run yet";
  run.write_json(RunDirectory::kSummary, Json::object());
  const std::string message = test::config_error_of([&] { run.check_unused(false); });
  EXPECT_NE(message.find("--run-dir '" + run.path() + "' already holds a run (summary.json)"), std::string::npos) << message;
  EXPECT_NE(message.find("--overwrite"), std::string::npos) << message;
  EXPECT_NO_THROW(run.check_unused(true));
  test::write_text(dir.file("file"), "x");
  EXPECT_NE(test::config_error_of([&] { RunDirectory(dir.file("file")).check_unused(false); }).find("is not a directory"),
            std::string::npos);
}

TEST(RunDirectoryTest, ARestartResumesTheNewestCheckpointOrStartsAgainInTheSameFolder) {
  test::TempDir dir;
  const RunDirectory run(dir.file("run"));
  const Json config = Json::object();
  {
    ScopedVariable restarts("TORCHELASTIC_RESTART_COUNT", std::nullopt);
    const RunStart fresh = choose_run_start(run, config, "");
    EXPECT_FALSE(fresh.resumes);
    EXPECT_FALSE(fresh.reuses_directory);
    EXPECT_EQ(fresh.restarts, 0);
  }
  ScopedVariable restarts("TORCHELASTIC_RESTART_COUNT", "2");
  ScopedVariable elastic("BASIN_ELASTIC", std::nullopt);
  const RunStart again = choose_run_start(run, config, "");
  EXPECT_FALSE(again.resumes);
  EXPECT_TRUE(again.reuses_directory) << "the first attempt's files are this run's";
  EXPECT_FALSE(again.reshard);
  EXPECT_NE(again.note.find("restart 2: no checkpoint in"), std::string::npos) << again.note;
  EXPECT_NE(again.note.find("training from the start"), std::string::npos) << again.note;
  EXPECT_NE(test::config_error_of([&] { choose_run_start(RunDirectory(""), config, ""); })
                .find("a restarted job (TORCHELASTIC_RESTART_COUNT 2) needs --run-dir"),
            std::string::npos);

  // Two checkpoints, the newer damaged: the restart takes the older, and its config.
  fs::create_directories(run.checkpoint_folder(config));
  StateDict saved = new_state_dict();
  saved.insert("config", std::string(R"({"seed": 7})"));
  const std::string older = run.checkpoint_folder(config) + "/" + checkpoint_file_name(4);
  write_checkpoint_file(older, saved);
  test::write_text(run.checkpoint_folder(config) + "/" + checkpoint_file_name(8), "not a checkpoint");
  ScopedVariable elastic_job("BASIN_ELASTIC", "1:2");
  const RunStart resumed = choose_run_start(run, config, "");
  EXPECT_TRUE(resumed.resumes);
  EXPECT_TRUE(resumed.reshard) << "an elastic job may come back on fewer ranks";
  EXPECT_EQ(resumed.point.path, older);
  EXPECT_EQ(checkpoint_config(resumed.point)["seed"], 7);

  // --resume names its checkpoint; a file that does not read back is a CheckpointError naming it.
  const RunStart named = choose_run_start(run, config, older);
  EXPECT_TRUE(named.resumes);
  EXPECT_EQ(named.point.path, older);
  const std::string missing = dir.file("missing.pt");
  EXPECT_NE(checkpoint_error_of([&] { choose_run_start(run, config, missing); }).find(missing), std::string::npos);
  StateDict without_config = new_state_dict();
  without_config.insert("loop", new_state_dict());
  EXPECT_NE(checkpoint_error_of([&] { checkpoint_config(ResumePoint{"x.pt", without_config}); })
                .find("checkpoint 'x.pt' holds no config; pass --config"),
            std::string::npos);
}

TEST(RunDirectoryTest, TheWorldSizeACheckpointWasSavedAtIsReadInOnePlace) {
  StateDict checkpoint = new_state_dict();
  EXPECT_EQ(saved_world_size(checkpoint), 1) << "no entry: one process wrote it";
  StateDict meta = new_state_dict();
  meta.insert("world_size", static_cast<int64_t>(3));
  checkpoint.insert("basin", meta);
  EXPECT_EQ(saved_world_size(checkpoint), 3);
}

TEST(RunDirectoryTest, RanksAgreeOnRankZerosDatedFolder) {
  // Each rank dates its folder by its own clock; a second's difference would
  // scatter a zero3 checkpoint's rank files over two folders.
  std::vector<std::string> agreed(3);
  test::run_ranks(3, [&](int rank, std::shared_ptr<Communicator> communicator) {
    const RunDirectory mine("runs/job-20261205-1200" + std::to_string(rank));
    agreed[static_cast<std::size_t>(rank)] = mine.agreed(*communicator, c10::Device(c10::kCPU)).path();
  });
  for (const auto& path : agreed) EXPECT_EQ(path, "runs/job-20261205-12000") << "every rank takes rank 0's folder";
}

}  // namespace
}  // namespace basin
