// Real processes on loopback, started by basin-run.

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <set>

#include "basin/core/base/interrupt.h"
#include "job_output.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

const std::string kRun = BASIN_RUN_EXE;
const std::string kTrain = BASIN_TRAIN_EXE;
const std::string kConfigs = std::string(BASIN_SOURCE_DIR) + "/examples/configs";

TEST(BasinRunTest, TwoProcessesTrainAndAgreeOnTheFinalWeights) {
  test::TempDir dir;
  const auto result = test::run_command(kRun + " --nproc 2 -- " + kTrain + " --config " + kConfigs +
                                        "/synthetic_ddp.json --run-dir " + dir.file("run"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto digests = test::final_digests(result.output, 2);
  EXPECT_FALSE(digests[0].empty()) << result.output;
  EXPECT_EQ(digests[0], digests[1]) << result.output;
  // Rank 0 alone wrote the run directory.
  const Json summary = Json::parse(test::read_text(dir.file("run/summary.json")));
  EXPECT_EQ(summary["steps"], 48);  // 512 samples / (16 per rank * 2 ranks) * 3 epochs
  EXPECT_NE(result.output.find("[rank 0] test accuracy"), std::string::npos);
  EXPECT_EQ(result.output.find("[rank 1] test accuracy"), std::string::npos);
}

TEST(BasinRunTest, KilledRankStopsTheJobAndIsNamed) {
  test::TempDir dir;
  // Rank 1 is killed two seconds into a run that would otherwise last for hours.
  const std::string rank_command = kTrain + " --config " + kConfigs + "/synthetic_ddp.json --run-dir " + dir.file("run") +
                                   " --set max_epochs=1000000 --set log_every=1000000 & pid=$!; "
                                   "if [ \"$RANK\" = 1 ]; then sleep 2; kill -9 $pid; fi; wait $pid";
  const auto start = std::chrono::steady_clock::now();
  const auto result = test::run_command(kRun + " --nproc 2 --grace 2 -- sh -c '" + rank_command + "'", 60);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.exit_code, 124) << "timed out:\n" << result.output;  // coreutils timeout's code
  EXPECT_NE(result.output.find("basin-run: failed: rank 1"), std::string::npos) << result.output;
  EXPECT_LT(seconds, 30);
}

TEST(BasinRunTest, RankThatIgnoresSigtermIsKilledAfterTheGrace) {
  // Rank 1 fails; rank 0 ignores SIGTERM and would sleep for ten minutes.
  const std::string rank_command =
      "if [ \"$RANK\" = 0 ]; then trap \"\" TERM; sleep 600; else sleep 1; exit 3; fi";
  const auto start = std::chrono::steady_clock::now();
  const auto result = test::run_command(kRun + " --nproc 2 --grace 1 -- sh -c '" + rank_command + "'", 60);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.exit_code, 3) << result.output;  // the failing rank's own code
  EXPECT_NE(result.output.find("basin-run: failed: rank 1 exited with code 3; then rank 0 was killed by signal 9"),
            std::string::npos)
      << result.output;
  EXPECT_GE(seconds, 2.0);  // 1 s of work, then the full grace
  EXPECT_LT(seconds, 20.0);
}

// A rank that stops answering (SIGSTOP, once the first checkpoint is
// written: the ranks are in their collectives then): the others' next
// collective times out after parallel.timeout_seconds (5), naming it and the
// rank; the launcher then stops the job. Never a silent hang.
std::string stop_rank_one_after_first_checkpoint(const std::string& run_dir) {
  return " & pid=$!; if [ \"$RANK\" = 1 ] && [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then "
         "while ! ls " + run_dir + "/checkpoints/*.sum > /dev/null 2>&1; do sleep 0.02; done; "
         "kill -STOP $pid; fi; wait $pid";
}

TEST(BasinRunTest, AStoppedRankEndsTheJobWithinTheTimeoutAndIsNamed) {
  test::TempDir dir;
  const std::string rank_command = kTrain + " --config " + kConfigs + "/synthetic_ddp.json --run-dir " + dir.file("run") +
                                   " --set max_epochs=1000000 --set parallel.timeout_seconds=5" +
                                   stop_rank_one_after_first_checkpoint(dir.file("run"));
  const auto start = std::chrono::steady_clock::now();
  const auto result = test::run_command(kRun + " --nproc 2 --grace 2 -- sh -c '" + rank_command + "'", 120);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.exit_code, 1) << result.output;
  // Rank 0 names the collective it waited in and the rank that did not come.
  // Rank 1 may stop inside the checkpoint callback's own collective (rank 0
  // writes the file, then both agree that it was written): the engine then
  // names the callback and the event first.
  const std::regex named(R"(\[rank 0\] basin-train: error: (callback 'checkpoint' failed on event 'epoch_end': )?)"
                         R"((all_reduce_sum|all_reduce_max|broadcast|barrier) #\d+ )"
                         R"(failed on rank 0 \(parallel.timeout_seconds 5\): rank 1 stopped answering)");
  EXPECT_TRUE(std::regex_search(result.output, named)) << result.output;
  EXPECT_NE(result.output.find("basin-run: failed: rank 0 exited with code 1; then rank 1 was killed by signal"),
            std::string::npos)
      << result.output;
  // An epoch of training, the 5 s timeout, 2.5 s to tell a stopped rank from a slow one, the 2 s grace.
  EXPECT_LT(seconds, 5 + 2.5 + 2 + 15);
}

TEST(BasinRunTest, AStoppedRankIsARestartUnderMaxRestarts) {
  test::TempDir dir;
  const std::string rank_command = kTrain + " --config " + kConfigs + "/synthetic_ddp.json --run-dir " + dir.file("run") +
                                   " --set max_epochs=150 --set log_every=1000000 --set parallel.timeout_seconds=5" +
                                   stop_rank_one_after_first_checkpoint(dir.file("run"));
  const auto result = test::run_command(kRun + " --nproc 2 --grace 2 --max-restarts 1 -- sh -c '" + rank_command + "'", 240);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("rank 1 stopped answering"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("basin-run: rank 0 exited with code 1; then rank 1 was killed by signal"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("restarting the job (1 of at most 1 restarts)"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("[rank 0] test accuracy"), std::string::npos) << result.output;
  const Json summary = Json::parse(test::read_text(dir.file("run/summary.json")));
  EXPECT_EQ(summary["restarts"], 1);
  EXPECT_EQ(summary["steps"], 150 * 16);
}

TEST(BasinRunTest, SigtermToTheLauncherCheckpointsEveryRankAndExitsResumable) {
  test::TempDir dir;
  const std::string job = kRun + " --nproc 2 --max-restarts 2 -- " + kTrain + " --config " + kConfigs +
                          "/synthetic_ddp.json --run-dir " + dir.file("run") +
                          " --set max_epochs=1000000 --set log_every=1000000";
  const auto result = test::run_command("sh -c '" + job + " & pid=$!; while ! ls " + dir.file("run") +
                                            "/checkpoints/*.sum > /dev/null 2>&1; do sleep 0.02; done; "
                                            "kill -TERM $pid; wait $pid'",
                                        120);
  EXPECT_EQ(result.exit_code, kExitInterrupted) << result.output;  // not restarted: the signal asked to stop
  EXPECT_NE(result.output.find("basin-run: the ranks stopped on a signal after writing a checkpoint; continue with "
                               "--resume latest"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("restarting"), std::string::npos) << result.output;
}

TEST(BasinRunTest, BadLauncherInputExitsTwo) {
  auto result = test::run_command(kRun + " --nproc 2");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("command"), std::string::npos) << result.output;
  result = test::run_command(kRun + " --nproc 0 -- true");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  result = test::run_command(kRun + " --nproc 2 -- /nonexistent/program");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("cannot run '/nonexistent/program'"), std::string::npos) << result.output;
}

TEST(BasinRunTest, RanksSeeTorchrunVariables) {
  // No port given: basin-run asks the OS for a free one and gives every rank the same.
  const auto result = test::run_command(kRun + " --nproc 3 -- sh -c 'echo $RANK/$WORLD_SIZE/$LOCAL_RANK@$MASTER_ADDR:$MASTER_PORT'");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::set<std::string> ports;
  for (int rank = 0; rank < 3; ++rank) {
    const std::regex line("\\[rank " + std::to_string(rank) + "\\] " + std::to_string(rank) + "/3/" + std::to_string(rank) +
                          "@127\\.0\\.0\\.1:(\\d+)");
    std::smatch match;
    ASSERT_TRUE(std::regex_search(result.output, match, line)) << result.output;
    ports.insert(match[1]);
  }
  EXPECT_EQ(ports.size(), 1u);
}

TEST(BasinRunTest, RanksFormAJobFromSlurmsVariablesAlone) {
  // As srun starts them: each task sees SLURM_* (its rank, the task count, the node list) and no torchrun
  // variable. basin-run only starts the processes here; the wrapper turns its variables into Slurm's.
  test::TempDir dir;
  const std::string as_slurm =
      "sh -c 'SLURM_NTASKS=$WORLD_SIZE SLURM_PROCID=$RANK SLURM_LOCALID=$LOCAL_RANK SLURM_JOB_NODELIST=localhost "
      "SLURM_JOB_ID=4242 exec env -u WORLD_SIZE -u RANK -u LOCAL_RANK -u MASTER_ADDR " +
      kTrain + " --config " + kConfigs + "/synthetic_ddp.json --run-dir " + dir.file("run") + "'";
  const auto result = test::run_command(kRun + " --nproc 2 -- " + as_slurm);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto digests = test::final_digests(result.output, 2);
  EXPECT_FALSE(digests[0].empty()) << result.output;
  EXPECT_EQ(digests[0], digests[1]) << result.output;
  EXPECT_EQ(Json::parse(test::read_text(dir.file("run/summary.json")))["steps"], 48) << "two ranks, not two lone runs";
}

}  // namespace
}  // namespace basin
