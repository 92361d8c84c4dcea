#pragma once

// The ranks one basin-run starts on its own machine: forked, each in a
// process group of its own, their output prefixed with the rank, and stopped
// together when one fails or the job must stop for a reason from outside.

#include <functional>
#include <string>
#include <vector>

namespace basin::launch {

/// What this machine's ranks of one attempt run, and as whom.
struct LocalRanks {
  int nproc = 1;           // ranks on this node
  int first_rank = 0;      // the global rank of local rank 0 (node rank x nproc)
  int world_size = 1;      // ranks in the whole job
  int node_rank = 0;       // this launcher's --node-rank, which names it
  int group_rank = 0;      // GROUP_RANK: this node's place among the attempt's nodes
  std::string elastic;     // BASIN_ELASTIC: "MIN:MAX" when the job may shrink ("" when not)
  std::string master_addr;
  int master_port = 0;     // where rank 0 hosts the ranks' store, this attempt
  int restart = 0;         // TORCHELASTIC_RESTART_COUNT
  int max_restarts = 0;    // TORCHELASTIC_MAX_RESTARTS
  double grace_seconds = 5;
  std::vector<std::string> command;
};

/// How this node's ranks of one attempt ended.
struct LocalOutcome {
  std::vector<int> statuses;      // waitpid statuses, by local rank
  int failed = -1;                // the first local rank seen to fail; -1: none
  std::vector<int> failures;      // every failed local rank, in the order seen
  std::string stopped_because;    // non-empty: stopped for a reason from outside (another node)
};

/// Polled while the ranks run (every few tens of milliseconds): a non-empty
/// answer stops them (SIGTERM, then SIGKILL after the grace).
using StopCheck = std::function<std::string()>;
/// Told once, at the first local failure, what failed.
using FailureReport = std::function<void(const std::string&)>;

/// Starts the ranks and waits for them all; throws nothing.
LocalOutcome run_local_ranks(const LocalRanks& plan, const StopCheck& stop_check, const FailureReport& report);

/// "rank 3", or "rank 3 (node 1)" in a job of several nodes.
std::string rank_name(const LocalRanks& plan, int local_rank);

/// "exited with code 3", "was killed by signal 9 (Killed)".
std::string describe_status(int status);

/// Whether the launcher was asked to stop (SIGINT, SIGTERM, SIGHUP).
bool launcher_interrupted();
/// Installs the launcher's signal handling (waitable children, no SIGPIPE).
void install_launcher_signals();

}  // namespace basin::launch
