// basin-run across machines: one launcher per node, --nnodes and
// --node-rank, meeting at node 0's launcher. The nodes are launchers on
// loopback here, or two network namespaces joined by a veth pair (as root):
// two machines' network stacks on this one.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include <torch/csrc/jit/serialization/pickle.h>

#include "basin/core/checkpoint/checkpoint_file.h"
#include "job_output.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

namespace fs = std::filesystem;

const std::string kRun = BASIN_RUN_EXE;
const std::string kTrain = BASIN_TRAIN_EXE;
const std::string kConfig = std::string(BASIN_SOURCE_DIR) + "/examples/configs/synthetic_ddp.json";

/// Runs the nodes' launchers side by side (each command is one node's),
/// each with its own output; waits for all of them.
std::vector<test::RunResult> run_nodes(const std::vector<std::string>& launchers, int timeout_seconds = 120) {
  test::TempDir dir;
  std::string script;
  for (std::size_t i = 0; i < launchers.size(); ++i) {
    const std::string node = dir.file("node" + std::to_string(i));
    script += "(timeout " + std::to_string(timeout_seconds) + " " + launchers[i] + " > " + node + ".out 2>&1; echo $? > " +
              node + ".rc) & ";
  }
  script += "wait";
  test::write_text(dir.file("nodes.sh"), script);
  std::system(("sh " + dir.file("nodes.sh")).c_str());
  std::vector<test::RunResult> results;
  for (std::size_t i = 0; i < launchers.size(); ++i) {
    const std::string node = dir.file("node" + std::to_string(i));
    test::RunResult result;
    const std::string rc = test::read_text(node + ".rc");
    result.exit_code = rc.empty() ? -1 : std::stoi(rc);
    result.output = test::read_text(node + ".out");
    results.push_back(result);
  }
  return results;
}

std::string launcher(int nnodes, int node_rank, int port, const std::string& extra, const std::string& command,
                     const std::string& addr = "127.0.0.1", int per_node = 1) {
  return kRun + " --nnodes " + std::to_string(nnodes) + " --node-rank " + std::to_string(node_rank) +
         " --nproc-per-node " + std::to_string(per_node) + " --master-addr " + addr + " --master-port " + std::to_string(port) + " " + extra + " -- " +
         command;
}

std::string bytes_of(const std::string& path) {
  EXPECT_TRUE(fs::exists(path)) << path;
  return test::read_text(path);
}

/// Two network namespaces joined by a veth pair, 10.213.0.1 and .2, made
/// and deleted by the test; `reason` says why not when they cannot be.
class TwoNamespaces {
 public:
  TwoNamespaces() {
    const std::string id = std::to_string(getpid());
    a_ = "basin-a-" + id, b_ = "basin-b-" + id;
    const std::string va = "bva" + id, vb = "bvb" + id;
    if (geteuid() != 0) {
      reason_ = "network namespaces need root (ip netns); this test runs as uid " + std::to_string(geteuid());
      return;
    }
    const std::string setup = "ip netns add " + a_ + " && ip netns add " + b_ + " && ip link add " + va +
                              " type veth peer name " + vb + " && ip link set " + va + " netns " + a_ +
                              " && ip link set " + vb + " netns " + b_ + " && ip -n " + a_ + " addr add 10.213.0.1/24 dev " +
                              va + " && ip -n " + b_ + " addr add 10.213.0.2/24 dev " + vb + " && ip -n " + a_ +
                              " link set " + va + " up && ip -n " + b_ + " link set " + vb + " up && ip -n " + a_ +
                              " link set lo up && ip -n " + b_ + " link set lo up";
    const auto made = test::run_command(setup, 30);
    if (made.exit_code != 0) reason_ = "cannot make network namespaces here (ip netns, veth): " + made.output;
  }
  ~TwoNamespaces() { std::system(("ip netns del " + a_ + " 2>/dev/null; ip netns del " + b_ + " 2>/dev/null").c_str()); }

  const std::string& reason() const { return reason_; }
  std::string in_a(const std::string& command) const { return "ip netns exec " + a_ + " " + command; }
  std::string in_b(const std::string& command) const { return "ip netns exec " + b_ + " " + command; }

 private:
  std::string a_, b_, reason_;
};

// The same SAM job (`train`: basin-train and its options, less --run-dir) as
// one node with 2 x `per_node` ranks, then as two nodes of `per_node` ranks
// each, in their own network namespaces: bit-equal weights.
void expect_two_namespaces_equal_one_node(const std::string& train, int per_node = 1) {
  TwoNamespaces namespaces;
  if (!namespaces.reason().empty()) GTEST_SKIP() << namespaces.reason();
  test::TempDir dir;
  const auto one =
      test::run_command(kRun + " --nproc " + std::to_string(2 * per_node) + " -- " + train + " --run-dir " + dir.file("one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::string two = train + " --run-dir " + dir.file("two");
  const std::string master = "10.213.0.1";
  const auto nodes = run_nodes({namespaces.in_a(launcher(2, 0, 29500, "--join-timeout 60", two, master, per_node)),
                                namespaces.in_b(launcher(2, 1, 29500, "--join-timeout 60", two, master, per_node))});
  ASSERT_EQ(nodes[0].exit_code, 0) << nodes[0].output << nodes[1].output;
  ASSERT_EQ(nodes[1].exit_code, 0) << nodes[1].output;
  const std::string first_of_node_1 = "[rank " + std::to_string(per_node) + "]";
  EXPECT_NE(nodes[1].output.find(first_of_node_1), std::string::npos) << nodes[1].output;  // node 1 ran its ranks
  EXPECT_EQ(bytes_of(dir.file("two/state_dict.pt")), bytes_of(dir.file("one/state_dict.pt")));
  const Json summary_one = Json::parse(test::read_text(dir.file("one/summary.json")));
  const Json summary_two = Json::parse(test::read_text(dir.file("two/summary.json")));
  EXPECT_EQ(summary_two["test_accuracy"], summary_one["test_accuracy"]);
  EXPECT_EQ(summary_two["test_loss"], summary_one["test_loss"]);
}

std::string synthetic_job(const std::string& mode) {
  return kTrain + " --config " + kConfig + " --set max_epochs=2 --set parallel.mode=" + mode;
}

TEST(MultiNodeTest, TwoNodesInNetworkNamespacesTrainDdpWithSamAsOneNodeDoesBitForBit) {
  expect_two_namespaces_equal_one_node(synthetic_job("ddp"));
}

TEST(MultiNodeTest, TwoNodesInNetworkNamespacesTrainZeroOneWithSamAsOneNodeDoesBitForBit) {
  expect_two_namespaces_equal_one_node(synthetic_job("zero1"));
}

// A language model across machines: a byte-level gpt under zero3 with SAM
// (its ascent synced, as zero3 requires) and 2 microbatches, on text.
TEST(MultiNodeTest, TwoNodesInNetworkNamespacesTrainAGptUnderZeroThreeAsOneNodeDoesBitForBit) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "Fortune " + std::to_string(i) + ": a journey of a thousand miles.\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  Json config = Json::parse(R"({"seed": 3, "threads": 1, "max_steps": 4,
    "model": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16},
    "optimizer": {"name": "adamw", "lr": 0.01},
    "algorithms": {"sam": {"rho": 0.05, "sync_ascent": true}},
    "parallel": {"mode": "zero3", "timeout_seconds": 60}})");
  config["data"] = {{"name", "text"}, {"train", dir.file("corpus.txt")}, {"block_size", 16}, {"batch_size", 8},
                    {"microbatches", 2}};
  test::write_text(dir.file("gpt.json"), config.dump());
  expect_two_namespaces_equal_one_node(kTrain + " --config " + dir.file("gpt.json"));
}

// HSDP as it is meant: zero3 within each node (groups of its 2 ranks), the
// gradients summed across the nodes; the same bits as the 4 ranks on one node.
TEST(MultiNodeTest, TwoNodesInNetworkNamespacesTrainHsdpShardedWithinEachAsOneNodeDoesBitForBit) {
  expect_two_namespaces_equal_one_node(synthetic_job("hsdp") +
                                           " --set parallel.shard_group_size=2 --set algorithms.sam.sync_ascent=true",
                                       2);
}

TEST(MultiNodeTest, TwoLaunchersOnLoopbackSetTorchrunsVariablesAndTrainAsOneNodeDoes) {
  test::TempDir dir;
  const int port = test::free_port();
  const std::string show = "sh -c 'echo vars $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK'";
  auto nodes = run_nodes({launcher(2, 0, port, "", show), launcher(2, 1, port, "", show)});
  EXPECT_NE(nodes[0].output.find("[rank 0] vars 0 2 0 1 0"), std::string::npos) << nodes[0].output;
  EXPECT_NE(nodes[1].output.find("[rank 1] vars 1 2 0 1 1"), std::string::npos) << nodes[1].output;

  const std::string train = kTrain + " --config " + kConfig + " --set max_epochs=2";
  const auto one = test::run_command(kRun + " --nproc 2 -- " + train + " --run-dir " + dir.file("one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const int port2 = test::free_port();
  nodes = run_nodes({launcher(2, 0, port2, "", train + " --run-dir " + dir.file("two")),
                     launcher(2, 1, port2, "", train + " --run-dir " + dir.file("two"))});
  ASSERT_EQ(nodes[0].exit_code, 0) << nodes[0].output << nodes[1].output;
  ASSERT_EQ(nodes[1].exit_code, 0) << nodes[1].output;
  EXPECT_EQ(bytes_of(dir.file("two/state_dict.pt")), bytes_of(dir.file("one/state_dict.pt")));
}

TEST(MultiNodeTest, ANodeThatNeverComesFailsEveryLauncherNamingItAndTheTimeout) {
  const int port = test::free_port();
  const auto start = std::chrono::steady_clock::now();
  const auto nodes = run_nodes({kRun + " --nnodes 3 --node-rank 0 --nproc 1 --master-port " + std::to_string(port) +
                                    " --join-timeout 3 -- true",
                                kRun + " --nnodes 3 --node-rank 1 --nproc 1 --master-port " + std::to_string(port) +
                                    " --join-timeout 3 -- true"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& node : nodes) {
    EXPECT_EQ(node.exit_code, 1) << node.output;
    EXPECT_NE(node.output.find("node 2 did not join the job within 3 s (--join-timeout)"), std::string::npos)
        << node.output;
  }
  EXPECT_LT(seconds, 20);
  // And node 0's launcher itself never coming: node 1 gives up, naming the address.
  const auto alone = test::run_command(kRun + " --nnodes 2 --node-rank 1 --nproc 1 --master-port " +
                                       std::to_string(test::free_port()) + " --join-timeout 2 -- true", 60);
  EXPECT_EQ(alone.exit_code, 1) << alone.output;
  EXPECT_NE(alone.output.find("node 0's launcher (at 127.0.0.1:"), std::string::npos) << alone.output;
  EXPECT_NE(alone.output.find("did not answer within 2 s (--join-timeout)"), std::string::npos) << alone.output;
}

TEST(MultiNodeTest, NodesStartedDifferentlyOrTwiceAreRefused) {
  const int port = test::free_port();
  const auto nodes = run_nodes({kRun + " --nnodes 2 --node-rank 0 --nproc 1 --master-port " + std::to_string(port) +
                                    " --join-timeout 5 -- true",
                                kRun + " --nnodes 2 --node-rank 1 --nproc 2 --master-port " + std::to_string(port) +
                                    " --join-timeout 5 -- true"});
  for (const auto& node : nodes) {
    EXPECT_EQ(node.exit_code, 2) << node.output;
    EXPECT_NE(node.output.find("node 1 was started with --nnodes 2 --nproc-per-node 2, node 0 with --nnodes 2 --nproc-per-node 1"),
              std::string::npos)
        << node.output;
  }
  // A second launcher for node 1 while the first is alive: its rank has started, and the ranks stay until the
  // second launcher has ended (at most a minute), so a busy machine's slow start cannot find the job gone.
  test::TempDir dir;
  const int port2 = test::free_port();
  const std::string rank = "sh -c \"touch " + dir.file("started\\$RANK") + "; i=0; while [ ! -e " + dir.file("refused") +
                           " ] && [ \\$i -lt 1200 ]; do sleep 0.05; i=\\$((i + 1)); done\"";
  const auto twice = run_nodes({launcher(2, 0, port2, "--join-timeout 20", rank),
                                launcher(2, 1, port2, "--join-timeout 20", rank),
                                "sh -c 'while [ ! -e " + dir.file("started1") + " ]; do sleep 0.02; done; " +
                                    launcher(2, 1, port2, "--join-timeout 20", "true") + "; code=$?; touch " +
                                    dir.file("refused") + "; exit $code'"});
  EXPECT_EQ(twice[0].exit_code, 0) << twice[0].output;
  EXPECT_EQ(twice[1].exit_code, 0) << twice[1].output;
  EXPECT_EQ(twice[2].exit_code, 1) << twice[2].output;
  EXPECT_NE(twice[2].output.find("node rank 1 is already in the job"), std::string::npos) << twice[2].output;
}

TEST(MultiNodeTest, ARankDyingOnOneNodeRestartsEveryNode) {
  // Attempt 0: rank 1 (node 1) exits 7 after a second, rank 0 would sleep for a minute.
  const std::string script =
      "sh -c 'if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then if [ \"$RANK\" = 1 ]; then sleep 1; exit 7; fi; "
      "exec sleep 60; fi; echo attempt $TORCHELASTIC_RESTART_COUNT of rank $RANK'";
  const int port = test::free_port();
  const auto start = std::chrono::steady_clock::now();
  const auto nodes = run_nodes({launcher(2, 0, port, "--max-restarts 2 --grace 1", script),
                                launcher(2, 1, port, "--max-restarts 2 --grace 1", script)});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& node : nodes) {
    EXPECT_EQ(node.exit_code, 0) << node.output;
    EXPECT_NE(node.output.find("rank 1 (node 1) exited with code 7; restarting the job (1 of at most 2 restarts)"),
              std::string::npos)
        << node.output;
    EXPECT_NE(node.output.find("the job finished after 1 restart"), std::string::npos) << node.output;
  }
  EXPECT_NE(nodes[0].output.find("[rank 0] attempt 1 of rank 0"), std::string::npos) << nodes[0].output;
  EXPECT_NE(nodes[1].output.find("[rank 1] attempt 1 of rank 1"), std::string::npos) << nodes[1].output;
  EXPECT_LT(seconds, 30);  // node 0's sleeping rank was stopped, not waited for
}

TEST(MultiNodeTest, ALostNodeStopsTheJobAndItsLauncherRejoinsTheRestart) {
  // Node 1's launcher is SIGKILLed (its rank goes with it); a new one for
  // node 1 starts three seconds later and joins the restarted job.
  test::TempDir dir;
  test::write_text(dir.file("rank.sh"),
                   "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then touch " + dir.file("started$RANK") +
                       "; exec sleep 60; fi\n"
                   "echo attempt $TORCHELASTIC_RESTART_COUNT of rank $RANK\n");
  const int port = test::free_port();
  const std::string options = "--max-restarts 1 --grace 1 --node-timeout 3 --join-timeout 30";
  const std::string node_one = launcher(2, 1, port, options, "sh " + dir.file("rank.sh"));
  // Killed once attempt 0 runs on node 1, so the new launcher must join the restart.
  test::write_text(dir.file("node1.sh"), node_one + " & pid=$!; while [ ! -e " + dir.file("started1") +
                                             " ]; do sleep 0.02; done; kill -9 $pid; sleep 3; exec " + node_one + "\n");
  const auto start = std::chrono::steady_clock::now();
  const auto nodes = run_nodes({launcher(2, 0, port, options, "sh " + dir.file("rank.sh")), "sh " + dir.file("node1.sh")});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(nodes[0].exit_code, 0) << nodes[0].output;
  EXPECT_NE(nodes[0].output.find("node 1 was lost: its launcher gave no sign of life for 3 s; restarting the job"),
            std::string::npos)
      << nodes[0].output;
  EXPECT_NE(nodes[0].output.find("[rank 0] attempt 1 of rank 0"), std::string::npos) << nodes[0].output;
  EXPECT_EQ(nodes[1].exit_code, 0) << nodes[1].output;
  EXPECT_NE(nodes[1].output.find("[rank 1] attempt 1 of rank 1"), std::string::npos) << nodes[1].output;
  EXPECT_LT(seconds, 40);  // not the minute node 0's first rank would sleep
}

/// Two launchers on loopback whose ranks run until the pauses are over:
/// node 1's launcher is stopped (SIGSTOP) for `pause` seconds, then, when
/// `pause_node_zero`, node 0's (the store's host) as well; then the ranks
/// finish. `node_timeout` is --node-timeout's seconds (0: the default). The third result is the pauser's: "node N state T" for each pause
/// it saw take hold.
std::vector<test::RunResult> run_with_paused_launchers(int node_timeout, int pause, bool pause_node_zero) {
  test::TempDir dir;
  test::write_text(dir.file("rank.sh"), "touch " + dir.file("started$RANK") + "; while [ ! -e " + dir.file("resumed") +
                                            " ]; do sleep 0.1; done; echo rank $RANK done\n");
  const int port = test::free_port();
  // node_timeout 0: basin-run's default window.
  const std::string options =
      (node_timeout > 0 ? "--node-timeout " + std::to_string(node_timeout) + " " : std::string()) + "--join-timeout 30";
  for (int node : {0, 1}) {
    const std::string n = std::to_string(node);
    test::write_text(dir.file("node" + n + ".sh"), launcher(2, node, port, options, "sh " + dir.file("rank.sh")) +
                                                       " & echo $! > " + dir.file("pid" + n) + "; wait $!\n");
  }
  std::string pauser = "while [ ! -e " + dir.file("started0") + " ] || [ ! -e " + dir.file("started1") +
                       " ]; do sleep 0.05; done\n";
  for (int node : pause_node_zero ? std::vector<int>{1, 0} : std::vector<int>{1}) {
    const std::string pid = "$(cat " + dir.file("pid" + std::to_string(node)) + ")";
    // A stop takes hold once each of the launcher's threads is scheduled: wait (at most 10 s) until it has.
    const std::string state = "$(cut -d' ' -f3 /proc/" + pid + "/stat)";
    pauser += "kill -STOP " + pid + "; i=0; until [ \"" + state + "\" = T ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i+1)); done; " +
              "echo node " + std::to_string(node) + " state " + state + "; sleep " + std::to_string(pause) + "; kill -CONT " +
              pid + "; sleep 1\n";
  }
  pauser += "touch " + dir.file("resumed") + "\n";
  test::write_text(dir.file("pauser.sh"), pauser);
  return run_nodes({"sh " + dir.file("node0.sh"), "sh " + dir.file("node1.sh"), "sh " + dir.file("pauser.sh")});
}

// A launcher that is not scheduled for a while (a busy machine; SIGSTOP
// here) is no lost node while its silence is shorter than --node-timeout:
// node 1's launcher, then node 0's, is paused for 4 s of the default 30 s
// window, and the job finishes on its first attempt. Paused for longer than the window
// (6 s of 3), node 1 is lost: the pause is what the window measures.
TEST(MultiNodeTest, ALauncherPausedForLessThanTheNodeTimeoutDoesNotEndTheJob) {
  const auto paused = run_with_paused_launchers(0, 4, true);
  EXPECT_NE(paused[2].output.find("node 1 state T"), std::string::npos) << paused[2].output;
  EXPECT_NE(paused[2].output.find("node 0 state T"), std::string::npos) << paused[2].output;
  for (int node : {0, 1}) {
    const auto& result = paused[static_cast<std::size_t>(node)];
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(result.output.find("was lost"), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find("restarting"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find("[rank " + std::to_string(node) + "] rank " + std::to_string(node) + " done"),
              std::string::npos)
        << result.output;
  }
  const auto too_long = run_with_paused_launchers(3, 6, false);
  EXPECT_NE(too_long[2].output.find("node 1 state T"), std::string::npos) << too_long[2].output;
  EXPECT_NE(too_long[0].exit_code, 0) << too_long[0].output;
  EXPECT_NE(too_long[0].output.find("node 1 was lost: its launcher gave no sign of life for 3 s"), std::string::npos)
      << too_long[0].output;
}

// An elastic job (--nnodes 1:2) of two nodes in their own network
// namespaces loses node 1 for good once a checkpoint exists: node 0 restarts
// it without node 1 after the last call, its rank resumes the newest
// checkpoint resharded from 2 ranks to 1, and the job finishes. Its final
// state is that of a one-rank run resumed (--reshard) from that checkpoint.
TEST(MultiNodeTest, AnElasticJobThatLosesANodeForGoodFinishesOnTheOtherResharded) {
  TwoNamespaces namespaces;
  if (!namespaces.reason().empty()) GTEST_SKIP() << namespaces.reason();
  test::TempDir dir;
  // 500 steps a rank: node 1 is killed long before the end.
  const std::string train = kTrain + " --config " + kConfig + " --set max_epochs=2 --set data.train_size=8000" +
                            " --set 'callbacks.checkpoint={\"every_steps\": 20, \"keep_last\": 0}' --run-dir " +
                            dir.file("job");
  const std::string options = "--max-restarts 1 --grace 1 --node-timeout 3 --join-timeout 60 --last-call-timeout 2";
  const std::string master = "10.213.0.1";
  const std::string first = dir.file("job/checkpoints/" + checkpoint_file_name(20) + ".sum");
  auto elastic = [&](int node_rank) {  // --nnodes 1:2
    std::string command = launcher(2, node_rank, 29500, options, train, master);
    return command.replace(command.find("--nnodes 2"), 10, "--nnodes 1:2");
  };
  test::write_text(dir.file("node1.sh"), elastic(1) + " & pid=$!; while [ ! -e " +
                                             first + " ]; do sleep 0.01; done; kill -9 $pid; wait $pid\n");
  const auto nodes = run_nodes({namespaces.in_a(elastic(0)), namespaces.in_b("sh " + dir.file("node1.sh"))});
  const std::string& out = nodes[0].output;
  ASSERT_EQ(nodes[0].exit_code, 0) << out << nodes[1].output;
  // Node 0 sees node 1 lost, or its rank sees rank 1 gone first: a restart either way.
  EXPECT_NE(out.find("; restarting the job (1 of at most 1 restarts)"), std::string::npos) << out;
  EXPECT_NE(out.find("attempt 1 runs on 1 of 2 nodes, without node 1"), std::string::npos) << out;
  const std::size_t at = out.find("resumed from ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string resumed_from = out.substr(at + 13, out.find(" at step", at) - at - 13);
  EXPECT_NE(out.find("resharded from 2 ranks to 1", at), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(dir.file("job/summary.json"))) << out;
  // From step S of epoch 0 (S x 32 samples taken), 16 samples a step on one rank, then epoch 1's 500.
  const int64_t step = std::stoll(out.substr(out.find(" at step", at) + 9));
  ASSERT_LT(step, 250) << out;
  EXPECT_EQ(Json::parse(test::read_text(dir.file("job/summary.json")))["steps"], step + (8000 - 32 * step) / 16 + 500);

  // The same resume by hand, on one rank.
  const auto by_hand = test::run_command(kRun + " --nproc 1 -- " + kTrain + " --run-dir " + dir.file("by_hand") +
                                         " --resume " + resumed_from + " --reshard");
  ASSERT_EQ(by_hand.exit_code, 0) << by_hand.output;
  const auto newest = [&](const std::string& run) {
    return read_checkpoint_file(list_checkpoint_files(dir.file(run + "/checkpoints")).front());
  };
  const StateDict job = newest("job"), hand = newest("by_hand");
  for (const char* part : {"model", "optimizer", "algorithms", "schedulers", "loop", "timestamp"}) {
    EXPECT_TRUE(torch::jit::pickle_save(job.at(part)) == torch::jit::pickle_save(hand.at(part))) << part;
  }
}

TEST(MultiNodeTest, ARankThatCannotSeeTheNewestCheckpointIsRefusedNamingIt) {
  // Node 1's run directory lacks the newest checkpoint: as if it were not shared.
  test::TempDir dir;
  const std::string train = kTrain + " --config " + kConfig + " --set max_epochs=2";
  const auto first = test::run_command(kRun + " --nproc 2 -- " + train + " --run-dir " + dir.file("shared"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  fs::copy(dir.file("shared"), dir.file("stale"), fs::copy_options::recursive);
  const std::string newest = "step-000000000032.pt";
  ASSERT_TRUE(fs::exists(dir.file("stale/checkpoints/" + newest)));
  fs::remove(dir.file("stale/checkpoints/" + newest));
  const int port = test::free_port();
  const std::string resume = " --resume latest --set max_epochs=3";
  const auto nodes = run_nodes({launcher(2, 0, port, "--max-restarts 2", kTrain + " --run-dir " + dir.file("shared") + resume),
                                launcher(2, 1, port, "--max-restarts 2", kTrain + " --run-dir " + dir.file("stale") + resume)});
  for (const auto& node : nodes) {
    EXPECT_EQ(node.exit_code, 2) << node.output;  // bad input: not restarted
    EXPECT_NE(node.output.find("the ranks do not see the same newest checkpoint: rank 0 resumes from " +
                               dir.file("shared/checkpoints/" + newest) + ", rank 1 sees step-000000000016.pt"),
              std::string::npos)
        << node.output;
    EXPECT_NE(node.output.find("(bad input: not restarted)"), std::string::npos) << node.output;
  }
}

}  // namespace
}  // namespace basin
