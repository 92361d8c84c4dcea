// basin-train under PyPI's torchrun, as clusters launch it: the static
// rendezvous, --standalone, and the c10d rendezvous with a rank killed,
// restarted by torchrun and resumed to the uninterrupted end. torchrun is the
// one beside the LibTorch this build uses (PyPI's); a build against Debian's
// LibTorch 1.13 is refused by torchrun 2.x's store, and says so in seconds.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <c10/core/CPUAllocator.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "job_output.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

const std::string kTrain = BASIN_TRAIN_EXE;

/// The torchrun of the virtual environment whose torch/lib/ this process
/// loaded LibTorch from (PyPI's wheel), or "" (Debian's LibTorch).
std::string torchrun_beside_libtorch() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 || info.dli_fname == nullptr) return "";
  // <venv>/lib/python3.X/site-packages/torch/lib/libc10.so
  const fs::path venv = fs::path(info.dli_fname).parent_path().parent_path().parent_path().parent_path().parent_path().parent_path();
  const fs::path torchrun = venv / "bin" / "torchrun";
  return fs::exists(torchrun) ? torchrun.string() : "";
}

/// PyPI's torchrun where scripts/libtorch.sh installed it, for the builds against Debian's LibTorch.
std::string installed_pypi_torchrun() {
  const char* cache = std::getenv("BASIN_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path root = cache != nullptr ? fs::path(cache) : fs::path(home != nullptr ? home : "/root") / ".cache" / "basin";
  const fs::path torchrun = root / "torch-2.11.0" / "bin" / "torchrun";
  return fs::exists(torchrun) ? torchrun.string() : "";
}

// A two-rank SAM job long enough (500 steps) to be killed in, with a checkpoint every 50 steps.
Json job_config() {
  return Json::parse(R"({
    "seed": 5, "threads": 1, "max_epochs": 2, "log_every": 100,
    "data": {"name": "synthetic", "train_size": 8000, "test_size": 64, "input_shape": [1, 4, 4],
             "num_classes": 3, "batch_size": 16},
    "model": {"name": "mlp", "hidden": [8]},
    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "schedulers": [{"name": "cosine_warmup", "warmup": 10}],
    "algorithms": {"sam": {"rho": 0.05}},
    "parallel": {"mode": "ddp", "timeout_seconds": 60},
    "callbacks": {"checkpoint": {"every_steps": 50, "keep_last": 2}}
  })");
}

class TorchrunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!BASIN_TORCH_AT_LEAST(2, 0)) GTEST_SKIP() << "this build uses Debian's LibTorch 1.13, which torchrun 2.x's store refuses (TorchrunOnLibTorchOneTest)";
    torchrun_ = torchrun_beside_libtorch();
    if (torchrun_.empty()) GTEST_SKIP() << "no torchrun beside this build's LibTorch (not PyPI's wheel)";
    test::write_text(dir_.file("config.json"), job_config().dump());
    const auto whole = test::run_command(std::string(BASIN_RUN_EXE) + " --nproc 2 -- " + kTrain + " --config " +
                                         dir_.file("config.json") + " --run-dir " + dir_.file("basin-run"), 300);
    ASSERT_EQ(whole.exit_code, 0) << whole.output;
    expected_ = test::final_digests(whole.output, 2);
    ASSERT_FALSE(expected_[0].empty()) << whole.output;
  }

  /// `torchrun <launch> --no-python <command>`, with every rank's digest checked against basin-run's job.
  void expect_as_basin_run(const std::string& launch, const std::string& command) {
    const auto job = test::run_command("env OMP_NUM_THREADS=1 " + torchrun_ + " " + launch + " --no-python " + command, 300);
    ASSERT_EQ(job.exit_code, 0) << launch << "\n" << job.output;
    EXPECT_EQ(test::final_digests(job.output, 2), expected_) << launch << "\n" << job.output;
  }

  std::string train(const std::string& run) const {
    return kTrain + " --config " + dir_.file("config.json") + " --run-dir " + dir_.file(run);
  }

  test::TempDir dir_;
  std::string torchrun_;
  std::vector<std::string> expected_;  // basin-run's job's digests
};

TEST_F(TorchrunTest, StaticAndStandaloneJobsTrainAsBasinRunsDoes) {
  expect_as_basin_run("--nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port " + std::to_string(test::free_port()),
                      train("static"));
  expect_as_basin_run("--standalone --nproc-per-node 2", train("standalone"));
}

// The c10d rendezvous (elastic: 1 to 2 nodes): rank 1 is SIGKILLed once the
// step-100 checkpoint is complete; torchrun restarts every rank, which
// resume from the newest checkpoint and end where basin-run's job ends.
TEST_F(TorchrunTest, AnElasticJobWithARankKilledRestartsAndResumesToTheUninterruptedEnd) {
  const std::string at = dir_.file("c10d/checkpoints/" + checkpoint_file_name(100) + ".sum");
  const std::string rank_command = "sh -c '" + train("c10d") +
                                   " & pid=$!; if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then "
                                   "while [ ! -e " + at + " ]; do sleep 0.005; done; kill -9 $pid; fi; wait $pid'";
  const auto job = test::run_command(
      "env OMP_NUM_THREADS=1 " + torchrun_ + " --nnodes 1:2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
          std::to_string(test::free_port()) + " --rdzv-conf last_call_timeout=1 --max-restarts 2 --no-python " + rank_command, 300);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_NE(job.output.find("resumed from"), std::string::npos) << "no restart resumed\n" << job.output;
  EXPECT_EQ(Json::parse(test::read_text(dir_.file("c10d/summary.json")))["restarts"], 1) << job.output;
  EXPECT_EQ(test::final_digests(job.output, 2), expected_) << job.output;
  EXPECT_EQ(Json::parse(test::read_text(dir_.file("c10d/summary.json")))["steps"], 500);
}

// Debian's LibTorch 1.13 cannot join torchrun 2.x's store (its server resets
// the connection): basin-train says so in seconds, and the c10d rendezvous
// without the shared store works.
TEST(TorchrunOnLibTorchOneTest, TheAgentsStoreIsRefusedInSecondsAndTheUnsharedStoreWorks) {
  if (BASIN_TORCH_AT_LEAST(2, 0)) GTEST_SKIP() << "this build's LibTorch joins torchrun's store (TorchrunTest)";
  const std::string torchrun = installed_pypi_torchrun();
  if (torchrun.empty()) GTEST_SKIP() << "PyPI's torchrun is not installed (scripts/libtorch.sh installs it with BASIN_LIBTORCH=pypi)";
  test::TempDir dir;
  const std::string train = kTrain + " --config " + std::string(BASIN_SOURCE_DIR) + "/examples/configs/synthetic_ddp.json --run-dir ";
  const auto start = std::chrono::steady_clock::now();
  const auto refused = test::run_command(torchrun + " --standalone --nproc-per-node 2 --no-python " + train + dir.file("shared"), 120);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("(exitcode: 2)"), std::string::npos) << "the ranks exit 2, bad input\n" << refused.output;
  EXPECT_NE(refused.output.find("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"), std::string::npos) << refused.output;
  EXPECT_LT(seconds, 60) << "not refused in seconds (the store client's own timeout is 90 s)\n" << refused.output;
  const auto unshared = test::run_command("env TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 " + torchrun +
                                          " --standalone --nproc-per-node 2 --no-python " + train + dir.file("unshared"), 120);
  ASSERT_EQ(unshared.exit_code, 0) << unshared.output;
  const auto digests = test::final_digests(unshared.output, 2);
  EXPECT_FALSE(digests[0].empty()) << unshared.output;
  EXPECT_EQ(digests[0], digests[1]) << unshared.output;
}

}  // namespace
}  // namespace basin
