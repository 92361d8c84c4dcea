// basin-run: starts a command as the ranks of one job, on this machine or
// on several (one basin-run per machine, --nnodes and --node-rank), with the
// variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
// TORCHELASTIC_MAX_RESTARTS). Each output line is prefixed with its rank. If
// a rank fails or a node is lost, every node's ranks are stopped; with
// --max-restarts K the job then starts again, at most K times (basin-train
// continues from its newest checkpoint), unless the rank exited with code 2
// (bad input, which a restart cannot mend). Otherwise basin-run exits
// non-zero, naming the rank. With --nnodes MIN:MAX an attempt may run on
// fewer nodes, down to MIN, when the others are lost (basin-train then
// resumes its checkpoint resharded for the smaller job).
//
//   basin-run --nproc 2 --max-restarts 3 -- basin-train --config examples/configs/synthetic_ddp.json --run-dir runs/job
//   basin-run --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 10.0.0.1 --master-port 29500 -- basin-train ...

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "basin/core/base/interrupt.h"
#include "basin/launch/coordinator.h"
#include "basin/launch/local_ranks.h"

namespace {

constexpr int kBadInput = 2;

using basin::launch::LocalOutcome;
using basin::launch::LocalRanks;
using basin::launch::NodeResult;

int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// How this node's attempt ended, for the job's verdict.
NodeResult result_of(const LocalRanks& plan, const LocalOutcome& outcome) {
  NodeResult result;
  result.interrupted = basin::launch::launcher_interrupted();
  if (outcome.failed >= 0) {
    const int status = outcome.statuses[static_cast<std::size_t>(outcome.failed)];
    result.code = exit_code_of(status);
    result.bad_input = WIFEXITED(status) && WEXITSTATUS(status) == kBadInput;
    result.what = basin::launch::rank_name(plan, outcome.failed) + " " + basin::launch::describe_status(status);
    for (int rank : outcome.failures) {
      if (rank == outcome.failed) continue;
      result.what += "; then " + basin::launch::rank_name(plan, rank) + " " +
                     basin::launch::describe_status(outcome.statuses[static_cast<std::size_t>(rank)]);
    }
    return result;
  }
  for (int status : outcome.statuses) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == basin::kExitInterrupted && outcome.stopped_because.empty()) {
      result.code = basin::kExitInterrupted;
    }
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"basin-run: run a command as the ranks of one job, on one machine or several (torchrun-style variables)"};
  basin::launch::JobShape shape;
  LocalRanks plan;
  double join_timeout_seconds = 300;
  app.add_option("--nproc,--nproc-per-node,--nproc_per_node", shape.nproc, "Processes (ranks) on this machine")
      ->required()
      ->check(CLI::Range(1, 1024));
  std::string nnodes = "1";
  app.add_option("--nnodes", nnodes,
                 "Machines in the job, each running its own basin-run (default 1); MIN:MAX for an elastic job, "
                 "whose restarts may run on as few as MIN when nodes are lost");
  double last_call_seconds = 30;
  app.add_option("--last-call-timeout", last_call_seconds,
                 "Elastic job: seconds an attempt waits for the missing nodes once MIN are there (default 30)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--node-rank,--node_rank", shape.node_rank, "This machine's index in [0, nnodes); node 0 coordinates")
      ->check(CLI::Range(0, 1023));
  app.add_option("--master-port,--master_port", shape.master_port,
                 "One machine: rank 0's port (default: a free one). Several: the port of node 0's launcher (default 29500)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--master-addr,--master_addr", shape.master_addr, "Address of node 0, which every node reaches (default 127.0.0.1)");
  app.add_option("--join-timeout", join_timeout_seconds, "Seconds the nodes wait for each other before each attempt (default 300)")
      ->check(CLI::PositiveNumber);
  double node_timeout_seconds = std::chrono::duration<double>(shape.lost_after).count();
  app.add_option("--node-timeout", node_timeout_seconds,
                 "Seconds without a sign of life from a node's launcher before it counts as lost (default 30, at least 3)")
      ->check(CLI::Range(3.0, 86400.0));
  app.add_option("--grace", plan.grace_seconds, "Seconds the other ranks get to stop after one fails, before SIGKILL");
  app.add_option("--max-restarts,--max_restarts", shape.max_restarts,
                 "Start the job again, at most this many times, when a rank dies or a node is lost (not on exit code 2)")
      ->check(CLI::Range(0, 1000));
  app.add_option("command", plan.command, "The command each rank runs, after --")->required();
  try {
    app.parse(argc, argv);
    try {
      basin::launch::parse_nodes_spec(nnodes, shape);
    } catch (const std::invalid_argument& error) {
      throw CLI::ValidationError("--nnodes", error.what());
    }
    if (shape.node_rank >= shape.nnodes) {
      throw CLI::ValidationError("--node-rank", "--node-rank " + std::to_string(shape.node_rank) +
                                                    " is not below --nnodes " + std::to_string(shape.nnodes));
    }
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kBadInput;
  }
  if (shape.nnodes > 1 && shape.master_port == 0) shape.master_port = 29500;
  shape.join_timeout = std::chrono::milliseconds(static_cast<int64_t>(join_timeout_seconds * 1000));
  shape.lost_after = std::chrono::milliseconds(static_cast<int64_t>(node_timeout_seconds * 1000));
  shape.last_call = std::chrono::milliseconds(static_cast<int64_t>(last_call_seconds * 1000));
  plan.nproc = shape.nproc;
  plan.node_rank = shape.node_rank;
  plan.master_addr = shape.master_addr;
  if (shape.min_nodes < shape.nnodes) plan.elastic = basin::launch::nodes_spec(shape);
  plan.max_restarts = shape.max_restarts;
  basin::launch::install_launcher_signals();

  std::unique_ptr<basin::launch::Coordinator> coordinator;
  try {
    coordinator = basin::launch::make_coordinator(shape);
  } catch (const basin::launch::LaunchError& error) {
    std::cerr << "basin-run: " << error.what() << std::endl;
    return error.code;
  } catch (const std::exception& error) {
    std::cerr << "basin-run: " << error.what() << std::endl;
    return 1;
  }
  for (int attempt = coordinator->first_attempt();; ++attempt) {
    const basin::launch::Start start = coordinator->start(attempt);
    if (!start.run) {
      std::cerr << "basin-run: " << start.message << std::endl;
      return start.code;
    }
    if (!start.message.empty()) std::cerr << "basin-run: " << start.message << std::endl;
    // The attempt's nodes, in node order, number its ranks: node k of them runs ranks k*nproc.. .
    std::vector<int> nodes = start.nodes;
    if (nodes.empty()) {
      for (int node = 0; node < shape.nnodes; ++node) nodes.push_back(node);
    }
    plan.group_rank = static_cast<int>(std::find(nodes.begin(), nodes.end(), shape.node_rank) - nodes.begin());
    plan.first_rank = plan.group_rank * shape.nproc;
    plan.world_size = static_cast<int>(nodes.size()) * shape.nproc;
    plan.master_port = start.port;
    plan.restart = attempt;
    const LocalOutcome outcome = basin::launch::run_local_ranks(
        plan, [&] { return coordinator->stop_reason(attempt); },
        [&](const std::string& what) { coordinator->report_failure(attempt, what); });
    const basin::launch::Verdict verdict = coordinator->finish(attempt, result_of(plan, outcome));
    if (!verdict.message.empty()) std::cerr << "basin-run: " << verdict.message << std::endl;
    if (!verdict.restart) return verdict.code;
  }
}
