#pragma once

// How the launchers of one job agree on it: when an attempt starts (and on
// which port rank 0 hosts the ranks' store), why it must stop, and whether
// the job then restarts or ends. One node needs no one to agree with
// (SoloCoordinator); several meet through a store that node 0's launcher
// hosts at --master-addr:--master-port (StoreCoordinator), as torchrun's
// agents do.

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace basin::launch {

/// How one attempt ended on one node.
struct NodeResult {
  int code = 0;              // 0: every rank finished; kExitInterrupted: stopped after a checkpoint; else a failure's exit code
  bool bad_input = false;    // the failure was exit code 2, which no restart mends
  bool interrupted = false;  // the launcher itself was asked to stop (SIGINT, SIGTERM, SIGHUP)
  bool lost = false;         // the node's launcher stopped answering
  std::string what;          // the failure, "rank 1 exited with code 137"
};

/// Whether an attempt may run, and where its ranks meet.
struct Start {
  bool run = false;
  int port = 0;         // MASTER_PORT for the ranks
  int code = 0;         // when not run: the launcher's exit code
  std::string message;  // when not run: why; when run: what this launcher says first ("" for nothing)
  /// The nodes (node ranks, ascending) that run the attempt; empty: all of
  /// them. An elastic job (--nnodes MIN:MAX) may run without some.
  std::vector<int> nodes;
};

/// What follows an attempt: another one, or the job's end with this exit code.
struct Verdict {
  bool restart = false;
  int code = 0;
  std::string message;  // printed by every launcher ("" for a plain success)
};

/// The failure seen first in an attempt, job-wide: on which node, and what.
struct FirstFailure {
  int node = -1;  // -1: none reported
  std::string what;
};

/// Decides what follows an attempt from every node's result (in node order).
/// A reported failure counts even when its node's own result does not show
/// one (its ranks were stopped before they failed).
Verdict decide(int attempt, int max_restarts, const std::vector<NodeResult>& results, const FirstFailure& first);

/// A launcher that cannot take part in the job, with the exit code to end on
/// (2: started differently from node 0; 1: node 0 unreachable).
struct LaunchError : std::runtime_error {
  LaunchError(int code, const std::string& what) : std::runtime_error(what), code(code) {}
  int code;
};

class Coordinator {
 public:
  virtual ~Coordinator() = default;
  /// The attempt this node starts at (a node that rejoins a restarting job joins its next attempt).
  virtual int first_attempt() { return 0; }
  /// Waits until every node is there for attempt `attempt`.
  virtual Start start(int attempt) = 0;
  /// Polled while this node's ranks run: why they must stop ("" to go on).
  virtual std::string stop_reason(int attempt) = 0;
  /// This node's first failure in the attempt, for every node to see.
  virtual void report_failure(int attempt, const std::string& what) = 0;
  /// This node's result; waits for every node's and returns the job's verdict.
  virtual Verdict finish(int attempt, const NodeResult& mine) = 0;
};

struct JobShape {
  int nnodes = 1;     // the most nodes (--nnodes N or MIN:MAX)
  int min_nodes = 1;  // the fewest an attempt runs with (N unless MIN:MAX)
  int node_rank = 0;
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // one node: rank 0's port (0: a free one per attempt); several: the launchers' store
  int max_restarts = 0;
  std::chrono::milliseconds join_timeout{300000};  // how long nodes wait for each other to start an attempt
  std::chrono::milliseconds last_call{30000};      // elastic: how long min_nodes wait for the rest
  /// A launcher silent this long is a lost node (--node-timeout). Long enough
  /// that a launcher a busy machine leaves unscheduled for seconds is not
  /// taken for dead; far shorter than the collectives' timeout
  /// (parallel.timeout_seconds, 300 s), so a dead machine's peers are stopped
  /// by their launchers, saying why.
  std::chrono::milliseconds lost_after{30000};
};

/// --nnodes as given: "N", or "MIN:MAX" for an elastic job.
std::string nodes_spec(const JobShape& shape);
/// Reads --nnodes ("N" or "MIN:MAX", 1 <= MIN <= MAX <= 1024) into `shape`;
/// throws std::invalid_argument saying what is expected.
void parse_nodes_spec(const std::string& text, JobShape& shape);

/// The launchers' coordinator through node 0's store (store_coordinator.cpp).
std::unique_ptr<Coordinator> make_store_coordinator(const JobShape& shape);

/// The coordinator for `shape`: solo for one node, else through node 0's
/// store. Throws LaunchError naming the address when node 0's launcher
/// cannot be reached (or, on node 0, its port cannot be bound), or naming
/// what differs when this node was started differently from node 0.
std::unique_ptr<Coordinator> make_coordinator(const JobShape& shape);

/// A TCP port free now on every interface (the ranks' store binds them all).
int free_port();

}  // namespace basin::launch
