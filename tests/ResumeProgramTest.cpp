// basin-train as a user runs it: killed or signalled mid-epoch, resumed with
// --resume latest, it ends where the uninterrupted run ends; its checkpoints
// open in Python, and Python's weights start a run (init_from).

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/jit/serialization/pickle.h>

#include "basin/core/base/interrupt.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/sharded_checkpoint.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

const std::string kTrain = BASIN_TRAIN_EXE;

// Long enough (about 2000 steps) that a signal lands mid-epoch.
Json long_config() {
  return Json::parse(R"({
    "seed": 5, "threads": 1, "max_epochs": 2, "log_every": 100,
    "data": {"name": "synthetic", "train_size": 16000, "test_size": 64, "input_shape": [1, 4, 4],
             "num_classes": 3, "batch_size": 16},
    "model": {"name": "mlp", "hidden": [8]},
    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "schedulers": [{"name": "cosine_warmup", "warmup": 10}],
    "callbacks": {"checkpoint": {"every_steps": 50, "keep_last": 2}}
  })");
}

/// basin-train started in the background, output to a file.
class Background {
 public:
  explicit Background(const std::vector<std::string>& args, const std::string& log) {
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  void signal(int number) { kill(pid_, number); }
  /// Exit code, or 128 + signal.
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

bool wait_for(const std::function<bool()>& condition, int seconds = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

std::string final_checkpoint(const std::string& run_dir) {
  const auto files = list_checkpoint_files(run_dir + "/checkpoints");
  return files.empty() ? "" : files.front();
}

// The final checkpoint's contents, pickled again: equal bytes, equal runs.
std::vector<char> final_state(const std::string& run_dir) {
  return torch::jit::pickle_save(read_checkpoint_file(final_checkpoint(run_dir)));
}

// metrics.jsonl's records, timings aside: equal records, one run.
std::vector<Json> records_of(const std::string& run_dir) {
  std::vector<Json> kept;
  std::istringstream lines(test::read_text(run_dir + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    Json record = Json::parse(line);
    record.erase("step_seconds");
    record.erase("samples_per_second");
    record.erase("train_seconds");
    kept.push_back(record);
  }
  return kept;
}

void expect_stopped_run_resumes_to_the_same_end(int signal_number) {
  test::TempDir dir;
  const std::string config = dir.file("config.json");
  test::write_text(config, long_config().dump());
  const std::string whole = dir.file("whole"), stopped = dir.file("stopped");
  const auto plain = test::run_command(kTrain + " --config " + config + " --run-dir " + whole);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;

  Background run({kTrain, "--config", config, "--run-dir", stopped}, dir.file("stopped.log"));
  // Stop it once its first checkpoint exists (step 50 of 1000 per epoch).
  ASSERT_TRUE(wait_for([&] { return fs::exists(stopped + "/checkpoints/" + checkpoint_file_name(50) + ".sum"); }));
  run.signal(signal_number);
  const int code = run.wait();
  const std::string log = test::read_text(dir.file("stopped.log"));
  if (signal_number == SIGTERM) {
    EXPECT_EQ(code, kExitInterrupted) << log;
    EXPECT_NE(log.find("stopped by SIGTERM"), std::string::npos) << log;
    EXPECT_NE(log.find("--resume latest"), std::string::npos) << log;
  } else {
    EXPECT_EQ(code, 128 + SIGKILL) << log;
  }
  ASSERT_FALSE(fs::exists(stopped + "/summary.json")) << "the run finished before the signal; nothing was tested";

  const auto resumed = test::run_command(kTrain + " --run-dir " + stopped + " --resume latest");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_TRUE(final_state(stopped) == final_state(whole)) << "the resumed run ended elsewhere";
  // The metrics file reads as one run: the same records (timings aside).
  EXPECT_EQ(records_of(stopped), records_of(whole));
}

TEST(ResumeProgramTest, SigtermMidEpochCheckpointsAndTheResumedRunEqualsTheUninterruptedOne) {
  expect_stopped_run_resumes_to_the_same_end(SIGTERM);
}

TEST(ResumeProgramTest, SigkillMidEpochThenResumeLatestEqualsTheUninterruptedRun) {
  expect_stopped_run_resumes_to_the_same_end(SIGKILL);
}

/// A two-process basin-run job of `config` run whole into `whole`, and run
/// into `stopped` with rank 1 SIGKILLed once the first checkpoint (step 50)
/// exists, then resumed there with `--resume latest` by `ranks` processes
/// (basin-train given `resume_options` too).
void kill_a_rank_and_resume(const Json& config, const std::string& config_file, const std::string& whole,
                            const std::string& stopped, int ranks = 2, const std::string& resume_options = "") {
  test::write_text(config_file, config.dump());
  const std::string run = BASIN_RUN_EXE;
  const auto plain = test::run_command(run + " --nproc 2 -- " + kTrain + " --config " + config_file + " --run-dir " + whole, 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;

  const std::string first = stopped + "/checkpoints/" + checkpoint_file_name(50) + ".sum";
  const std::string rank_command = kTrain + " --config " + config_file + " --run-dir " + stopped +
                                   " & pid=$!; if [ \"$RANK\" = 1 ]; then while [ ! -e " + first +
                                   " ]; do sleep 0.01; done; kill -9 $pid; fi; wait $pid";
  const auto killed = test::run_command(run + " --nproc 2 --grace 2 -- sh -c '" + rank_command + "'", 300);
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_NE(killed.output.find("basin-run: failed: rank 1"), std::string::npos) << killed.output;
  ASSERT_FALSE(fs::exists(stopped + "/summary.json")) << "the job finished before the kill; nothing was tested";

  const auto resumed =
      test::run_command(run + " --nproc " + std::to_string(ranks) + " -- " + kTrain + " --run-dir " + stopped +
                        " --resume latest " + resume_options, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  if (ranks != 2) {
    EXPECT_NE(resumed.output.find("resharded from 2 ranks to " + std::to_string(ranks)), std::string::npos)
        << resumed.output;
  }
}

// Two ranks under zero2 (basin-run): rank 1 is SIGKILLed mid-epoch once the
// first checkpoint exists, the job fails, and `--resume latest` under
// basin-run ends where the uninterrupted job ends.
TEST(ResumeProgramTest, ZeroTwoJobWithARankSigkilledMidEpochResumesToTheUninterruptedEnd) {
  test::TempDir dir;
  Json config = long_config();
  config["data"]["train_size"] = 8000;  // 250 steps an epoch on two ranks
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05, "sync_ascent": true}})");
  config["parallel"] = Json::parse(R"({"mode": "zero2", "timeout_seconds": 60})");
  const std::string whole = dir.file("whole"), stopped = dir.file("stopped");
  kill_a_rank_and_resume(config, dir.file("config.json"), whole, stopped);
  if (HasFatalFailure()) return;
  EXPECT_TRUE(final_state(stopped) == final_state(whole)) << "the resumed job ended elsewhere";
  EXPECT_EQ(records_of(stopped), records_of(whole));
}

// long_config under zero3 with SAM, 250 steps an epoch on two ranks.
Json zero3_sam_config() {
  Json config = long_config();
  config["data"]["train_size"] = 8000;
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  config["parallel"] = Json::parse(R"({"mode": "zero3", "timeout_seconds": 60})");
  return config;
}

// The same under zero3, where every rank writes its own file: the resumed
// job's final manifest and rank files equal the uninterrupted job's; the
// consolidated checkpoint opens in Python and its weights equal a ddp job's.
TEST(ResumeProgramTest, ZeroThreeJobWithARankSigkilledMidEpochResumesToTheUninterruptedEnd) {
  test::TempDir dir;
  Json config = zero3_sam_config();
  const std::string config_file = dir.file("config.json");
  const std::string whole = dir.file("whole"), stopped = dir.file("stopped"), ddp = dir.file("ddp");
  kill_a_rank_and_resume(config, config_file, whole, stopped);
  if (HasFatalFailure()) return;
  const std::string run = BASIN_RUN_EXE;
  const std::string manifest = final_checkpoint(stopped);
  const auto stopped_files = rank_files(manifest, read_checkpoint_file(manifest));
  const auto whole_files = rank_files(final_checkpoint(whole), read_checkpoint_file(final_checkpoint(whole)));
  ASSERT_EQ(stopped_files.size(), 2u);
  EXPECT_TRUE(final_state(stopped) == final_state(whole)) << "the manifests differ";
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_TRUE(torch::jit::pickle_save(read_checkpoint_file(stopped_files[r])) ==
                torch::jit::pickle_save(read_checkpoint_file(whole_files[r])))
        << "rank " << r << "'s resumed file ended elsewhere";
  }
  EXPECT_EQ(records_of(stopped), records_of(whole));

  // Joined into one file, Python reads the weights, and they are a ddp job's (to rounding).
  config["parallel"]["mode"] = "ddp";
  config["algorithms"]["sam"]["sync_ascent"] = true;  // zero3's ascent
  test::write_text(config_file, config.dump());
  const auto replicated = test::run_command(run + " --nproc 2 -- " + kTrain + " --config " + config_file + " --run-dir " + ddp, 300);
  ASSERT_EQ(replicated.exit_code, 0) << replicated.output;
  const std::string joined = dir.file("joined.pt");
  const auto before = torch::jit::pickle_save(read_checkpoint_file(manifest));
  const auto over_itself = test::run_command(std::string(BASIN_CONSOLIDATE_EXE) + " " + manifest + " " + manifest);
  EXPECT_EQ(over_itself.exit_code, 2) << over_itself.output;
  EXPECT_NE(over_itself.output.find("one of the files it joins"), std::string::npos) << over_itself.output;
  EXPECT_TRUE(torch::jit::pickle_save(read_checkpoint_file(manifest)) == before) << "the manifest was overwritten";
  const auto consolidate = test::run_command(std::string(BASIN_CONSOLIDATE_EXE) + " " + manifest + " " + joined);
  ASSERT_EQ(consolidate.exit_code, 0) << consolidate.output;
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch): not read there";
  const auto python = test::run_command(
      "/usr/bin/python3 -c \"import sys, torch; a = torch.load(sys.argv[1])['model']; b = torch.load(sys.argv[2])['model']; "
      "assert sorted(a) == sorted(b), (sorted(a), sorted(b)); "
      "d = max((a[k].double() - b[k].double()).abs().max().item() for k in a); "
      "print('max difference', d); assert d <= 1e-5, d\" " + joined + " " + final_checkpoint(ddp));
  EXPECT_EQ(python.exit_code, 0) << python.output;
}

// A two-rank zero3 job loses rank 1 to SIGKILL mid-epoch and resumes on one
// rank with twice the batch (--reshard, and --allow-config-change for the
// batch size): every later step takes the same 32 samples, so it ends where
// the two-rank job ends, up to the order of the sums.
TEST(ResumeProgramTest, ZeroThreeJobWithARankSigkilledResumesOnOneRankToTheTwoRankEnd) {
  test::TempDir dir;
  Json config = zero3_sam_config();
  const std::string whole = dir.file("whole"), stopped = dir.file("stopped");
  kill_a_rank_and_resume(config, dir.file("config.json"), whole, stopped, 1,
                         "--reshard --allow-config-change --set data.batch_size=32");
  if (HasFatalFailure()) return;
  const StateDict resumed = consolidate_checkpoint(final_checkpoint(stopped));
  const StateDict went_on = consolidate_checkpoint(final_checkpoint(whole));
  EXPECT_EQ(resumed.at("timestamp").toGenericDict().at("step").toInt(), 500);
  EXPECT_EQ(resumed.at("basin").toGenericDict().at("world_size").toInt(), 1);
  const StateDict a = resumed.at("model").toGenericDict(), b = went_on.at("model").toGenericDict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& entry : b) {
    const at::Tensor gap = (a.at(entry.key()).toTensor() - entry.value().toTensor()).abs().max();
    EXPECT_LE(gap.item<double>(), 1e-5) << entry.key().toStringRef();
  }
}

// Chaos: a two-rank SAM job under `basin-run --max-restarts 3`, a rank
// SIGKILLed in each of its first three attempts, a random few milliseconds
// after a checkpoint drawn at random (rank 1, then rank 0, the writer, then
// rank 1). The job restarts by itself from its newest checkpoint each time
// and ends as the uninterrupted job: final checkpoint and metrics.jsonl.
TEST(ResumeProgramTest, AJobWhoseRanksAreKilledThreeTimesRestartsByItselfToTheUninterruptedEnd) {
  test::TempDir dir;
  Json config = long_config();
  config["data"]["train_size"] = 8000;  // 250 steps an epoch on two ranks, 500 in all
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  config["parallel"] = Json::parse(R"({"mode": "ddp", "timeout_seconds": 60})");
  const std::string config_file = dir.file("config.json"), whole = dir.file("whole"), chaos = dir.file("chaos");
  test::write_text(config_file, config.dump());
  const std::string run = BASIN_RUN_EXE;
  const auto plain = test::run_command(run + " --nproc 2 -- " + kTrain + " --config " + config_file + " --run-dir " + whole, 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;

  // Attempt r kills rank (r + 1) % 2 once checkpoint steps[r] is complete: steps 100 or more apart (a
  // kill lands within 30 ms, a few steps), so an attempt never starts past its own, and before the
  // last step (500), so that no kill can come after the job's end.
  std::mt19937 random(static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  const int steps[3] = {50 * (1 + static_cast<int>(random() % 2)), 50 * (5 + static_cast<int>(random() % 2)),
                        50 * (8 + static_cast<int>(random() % 2))};
  const int delays_ms[3] = {static_cast<int>(random() % 30), static_cast<int>(random() % 30), static_cast<int>(random() % 30)};
  std::string plan = "case $TORCHELASTIC_RESTART_COUNT in";
  for (int r = 0; r < 3; ++r) {
    plan += " " + std::to_string(r) + ") victim=" + std::to_string((r + 1) % 2) + " at=" + chaos + "/checkpoints/" +
            checkpoint_file_name(steps[r]) + ".sum delay=0.0" + (delays_ms[r] < 10 ? "0" : "") +
            std::to_string(delays_ms[r]) + " ;;";
  }
  plan += " *) victim=none ;; esac";
  const std::string rank_command = plan + "; " + kTrain + " --config " + config_file + " --run-dir " + chaos +
                                   " & pid=$!; if [ \"$RANK\" = \"$victim\" ]; then while [ ! -e $at ]; do sleep 0.005; done; "
                                   "sleep $delay; kill -9 $pid; fi; wait $pid";
  SCOPED_TRACE("kills after checkpoints " + std::to_string(steps[0]) + ", " + std::to_string(steps[1]) + ", " +
               std::to_string(steps[2]) + " (+" + std::to_string(delays_ms[0]) + ", " + std::to_string(delays_ms[1]) +
               ", " + std::to_string(delays_ms[2]) + " ms)");
  const auto job = test::run_command(run + " --nproc 2 --grace 2 --max-restarts 3 -- sh -c '" + rank_command + "'", 600);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  for (int r = 1; r <= 3; ++r) {
    EXPECT_NE(job.output.find("restarting the job (" + std::to_string(r) + " of at most 3 restarts)"), std::string::npos)
        << job.output;
  }
  EXPECT_NE(job.output.find("rank 0 exited with code 137"), std::string::npos) << job.output;  // its shell: 128 + SIGKILL
  EXPECT_NE(job.output.find("basin-run: the job finished after 3 restarts"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("resumed from"), std::string::npos) << job.output;
  EXPECT_TRUE(final_state(chaos) == final_state(whole)) << "the restarted job ended elsewhere";
  EXPECT_EQ(records_of(chaos), records_of(whole));
  EXPECT_EQ(Json::parse(test::read_text(chaos + "/summary.json"))["restarts"], 3);
  EXPECT_EQ(Json::parse(test::read_text(whole + "/summary.json"))["restarts"], 0);
}

// A rank that exits with code 2 (bad input) is not restarted: the same input would fail again.
TEST(ResumeProgramTest, BadInputIsNotRestarted) {
  test::TempDir dir;
  Json config = long_config();
  config["parallel"] = Json::parse(R"({"mode": "ddp"})");
  config["optimizer"]["lr"] = -1;
  test::write_text(dir.file("config.json"), config.dump());
  const auto job = test::run_command(std::string(BASIN_RUN_EXE) + " --nproc 2 --max-restarts 3 -- " + kTrain +
                                     " --config " + dir.file("config.json") + " --run-dir " + dir.file("run"), 120);
  EXPECT_EQ(job.exit_code, 2) << job.output;
  EXPECT_NE(job.output.find("(bad input: not restarted)"), std::string::npos) << job.output;
  EXPECT_EQ(job.output.find("restarting the job"), std::string::npos) << job.output;
}

TEST(ResumeProgramTest, ResumeLatestFallsBackPastADamagedCheckpointAndSaysSo) {
  test::TempDir dir;
  const std::string run_dir = dir.file("run");
  const auto first = test::run_command(kTrain + " --config " + std::string(BASIN_SOURCE_DIR) +
                                       "/examples/configs/synthetic_smoke.json --run-dir " + run_dir);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto files = list_checkpoint_files(run_dir + "/checkpoints");
  ASSERT_GE(files.size(), 2u);
  std::ofstream(files.front(), std::ios::binary | std::ios::app) << "x";  // one byte too many
  const auto damaged = test::run_command(kTrain + " --run-dir " + run_dir + " --resume " + files.front());
  EXPECT_EQ(damaged.exit_code, 2) << damaged.output;
  EXPECT_NE(damaged.output.find(files.front()), std::string::npos) << damaged.output;
  EXPECT_NE(damaged.output.find("truncated or was changed"), std::string::npos) << damaged.output;

  const auto resumed = test::run_command(kTrain + " --run-dir " + run_dir + " --resume latest");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(files.front()), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("falling back"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find(files[1]), std::string::npos) << resumed.output;
}

// A damaged rank file of a zero3 checkpoint fails on its own rank alone: the
// others learn it at once, not after parallel.timeout_seconds, and every rank
// exits 2 naming the file.
TEST(ResumeProgramTest, ADamagedRankFileStopsEveryRankAtOnceNamingIt) {
  test::TempDir dir;
  Json config = zero3_sam_config();
  config["data"]["train_size"] = 3200;  // 100 steps: checkpoints at 50 and 100
  config["max_epochs"] = 1;
  config["parallel"]["timeout_seconds"] = 300;
  const std::string config_file = dir.file("config.json"), run_dir = dir.file("run");
  test::write_text(config_file, config.dump());
  const std::string job = std::string(BASIN_RUN_EXE) + " --nproc 2 -- " + kTrain + " --config " + config_file + " --run-dir " + run_dir;
  const auto first = test::run_command(job, 120);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string manifest = final_checkpoint(run_dir);
  const std::string damaged = rank_files(manifest, read_checkpoint_file(manifest))[1];
  std::ofstream(damaged, std::ios::binary | std::ios::app) << "x";  // one byte too many
  const auto start = std::chrono::steady_clock::now();
  const auto resumed = test::run_command(job + " --resume " + manifest, 200);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(resumed.exit_code, 2) << resumed.output;
  EXPECT_LT(seconds, 60) << "the ranks waited for the collective's timeout (300 s)\n" << resumed.output;
  for (const std::string rank : {"[rank 0]", "[rank 1]"}) {
    const auto line = resumed.output.find(rank + " basin-train: the job cannot resume: rank 1: checkpoint '" + damaged + "'");
    EXPECT_NE(line, std::string::npos) << rank << " does not name the file\n" << resumed.output;
  }
  // --resume latest vouches for every rank file by its sum on every rank, so all fall back together.
  const auto latest = test::run_command(job + " --resume latest", 200);
  ASSERT_EQ(latest.exit_code, 0) << latest.output;
  EXPECT_NE(latest.output.find("falling back"), std::string::npos) << latest.output;
  EXPECT_NE(latest.output.find("resumed from " + run_dir + "/checkpoints/" + checkpoint_file_name(50)), std::string::npos)
      << latest.output;
}

TEST(ResumeProgramTest, AFullDiskStopsTrainingAndKeepsTheLastCheckpoint) {
  test::TempDir dir;
  const std::string run_dir = dir.file("run"), folder = dir.file("run/checkpoints");
  const auto first = test::run_command(kTrain + " --config " + std::string(BASIN_SOURCE_DIR) +
                                       "/examples/configs/synthetic_smoke.json --run-dir " + run_dir +
                                       " --set max_epochs=1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto written = list_checkpoint_files(folder);
  ASSERT_EQ(written.size(), 1u);
  // A file-size limit below one checkpoint fails its write part way, as a
  // full disk does (EFBIG where a disk gives ENOSPC; the same failed write).
  const uintmax_t limit_kb = fs::file_size(written.front()) / 2 / 1024;
  ASSERT_GT(limit_kb, 1u);
  const auto full = test::run_command("sh -c \"trap '' XFSZ; ulimit -f " + std::to_string(limit_kb) + "; exec " +
                                      kTrain + " --run-dir " + run_dir + " --resume latest --set max_epochs=2\"");
  EXPECT_EQ(full.exit_code, 1) << full.output;
  EXPECT_NE(full.output.find("cannot write checkpoint '" + folder + "/" + checkpoint_file_name(32) +
                             "' (write): File too large; training stops"),
            std::string::npos)
      << full.output;
  // The earlier checkpoint is whole and alone: no partial file is left.
  EXPECT_EQ(list_checkpoint_files(folder), written);
  EXPECT_EQ(std::distance(fs::directory_iterator(folder), fs::directory_iterator()), 2);  // .pt and .pt.sum
  EXPECT_NO_THROW(read_checkpoint_file(written.front()));
  // With room again, the run resumes from it and finishes.
  const auto resumed = test::run_command(kTrain + " --run-dir " + run_dir + " --resume latest --set max_epochs=2");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(list_checkpoint_files(folder).front(), folder + "/" + checkpoint_file_name(32));
}

TEST(ResumeProgramTest, PythonOpensACheckpointAndItsWeightsEqualTheProgramsOnes) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  const std::string run_dir = dir.file("run");
  const auto run = test::run_command(kTrain + " --config " + std::string(BASIN_SOURCE_DIR) +
                                     "/examples/configs/synthetic_smoke.json --run-dir " + run_dir);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string checkpoint = final_checkpoint(run_dir);
  const std::string copy = dir.file("from_python.pt");
  // Python opens it as a dict and saves the weights it sees; they come back bit-equal.
  const auto python = test::run_command(
      "/usr/bin/python3 -c \"import sys, torch; c = torch.load(sys.argv[1]); "
      "assert isinstance(c, dict) and c['basin']['format'] == 1; "
      "assert c['timestamp']['step'] == 48, c['timestamp']; "
      "assert sorted(c['optimizer']['state'][0]) == ['momentum_buffer']; "
      "torch.save(c['model'], sys.argv[2]); print('python read', len(c['model']), 'tensors')\" " +
      checkpoint + " " + copy);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  // The run's state_dict.pt: what torch.load reads with weights_only=True (PyTorch 2.6's default), the final weights.
  const auto weights_only = test::run_command(
      "/usr/bin/python3 -c \"import sys, torch; s = torch.load(sys.argv[1], weights_only=True); "
      "m = torch.load(sys.argv[2])['model']; assert sorted(s) == sorted(m), (sorted(s), sorted(m)); "
      "assert all(torch.equal(s[k], m[k]) for k in s)\" " + run_dir + "/state_dict.pt " + checkpoint);
  EXPECT_EQ(weights_only.exit_code, 0) << weights_only.output;
  std::ifstream in(copy, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto from_python = torch::jit::pickle_load(bytes).toGenericDict();
  const auto from_cpp = read_checkpoint_file(checkpoint).at("model").toGenericDict();
  ASSERT_EQ(from_python.size(), from_cpp.size());
  for (const auto& entry : from_cpp) {
    EXPECT_TRUE(at::equal(entry.value().toTensor(), from_python.at(entry.key()).toTensor())) << entry.key().toStringRef();
  }
}

TEST(ResumeProgramTest, PythonWeightsStartARunAndTheFirstForwardEqualsPythons) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  const std::string ordered = dir.file("ordered.pt"), weights = dir.file("weights.pt"), probe = dir.file("probe.pt");
  // basin's mlp, written in Python: flatten, Linear+ReLU, Linear; the same names.
  const auto python = test::run_command(
      "/usr/bin/python3 -c \"import sys, torch\n"
      "torch.manual_seed(7)\n"
      "class Mlp(torch.nn.Module):\n"
      "  def __init__(self):\n"
      "    super().__init__(); self.fc0 = torch.nn.Linear(36, 16); self.out = torch.nn.Linear(16, 3)\n"
      "  def forward(self, x): return self.out(torch.relu(self.fc0(x.flatten(1))))\n"
      "m = Mlp(); x = torch.randn(5, 1, 6, 6)\n"
      "torch.save(m.state_dict(), sys.argv[1])\n"
      "torch.save(dict(m.state_dict()), sys.argv[2])\n"
      "torch.save({'input': x, 'output': m(x).detach()}, sys.argv[3])\" " + ordered + " " + weights + " " + probe);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  std::ifstream in(probe, std::ios::binary);
  const auto expected = torch::jit::pickle_load(std::vector<char>((std::istreambuf_iterator<char>(in)),
                                                                  std::istreambuf_iterator<char>())).toGenericDict();
  Json config = test::smoke_config();
  // state_dict() itself (an OrderedDict, which LibTorch alone reads as None) and a plain dict.
  for (const std::string& file : {ordered, weights}) {
    config["init_from"] = file;
    Trainer trainer(config);
    at::NoGradGuard no_grad;
    const at::Tensor output = trainer.model().forward(expected.at("input").toTensor());
    EXPECT_TRUE(at::allclose(output, expected.at("output").toTensor(), 1e-6, 1e-7))
        << file << ": " << (output - expected.at("output").toTensor()).abs().max().item<double>();
  }

  // A model of other widths: the mis-shaped tensor is named.
  config["init_from"] = weights;
  config["model"]["hidden"] = Json::array({8});
  const std::string shape = test::trainer_config_error(config);
  EXPECT_NE(shape.find("'fc0.bias' has shape [16], the model's [8]"), std::string::npos) << shape;
  // A deeper model lacks nothing in the file but has tensors the file lacks.
  config["model"]["hidden"] = Json::array({16, 16});
  const std::string missing = test::trainer_config_error(config);
  EXPECT_NE(missing.find("lacks tensor 'fc1."), std::string::npos) << missing;
  // Asked for, the missing ones keep their initial values.
  config["init_from"] = Json{{"path", weights}, {"allow_missing", true}};
  EXPECT_EQ(test::trainer_config_error(config), "(no error)");
}

}  // namespace
}  // namespace basin
