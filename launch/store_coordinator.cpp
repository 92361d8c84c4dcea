// The launchers of a job of several nodes meet in a store that node 0's
// launcher hosts at --master-addr:--master-port, as torchrun's agents do.
//
// Keys (under basin-run/), in a store of launch/launcher_store.h:
//   shape              node 0's "MIN:MAX NPROC", said once node 0 beats: a node started otherwise refuses itself
//   incarnation/R      launchers node R has had; each counts its own beats in
//   beat/R/I           (a thread, once a second: counts, not clocks, so machines' clocks may differ)
//   refused/R          why node R refused itself (started otherwise than node 0)
//   next               the attempt node 0 is gathering the nodes for; ready/N/R: node R waits for it
//   attempt/N          "run PORT NODE..." (the nodes that run it) or "end CODE MESSAGE", from node 0
//   failed/N           "R WHAT": the attempt's first failure, and its node
//   end/N/R            node R's result of attempt N
//   verdict/N          "restart CODE MESSAGE" or "end CODE MESSAGE", from node 0
//   bye/R              node R's launcher read the job's end (node 0 waits for the job's nodes before its store goes)
// A node is lost when its launcher's beats stop for lost_after, or when a new
// launcher replaced the one that started the attempt (node_beat.h has the
// beats). An elastic job (--nnodes MIN:MAX) restarts without nodes that miss
// the last call, if MIN are there; a node that missed an attempt's start ends.

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "basin/launch/coordinator.h"
#include "basin/launch/launcher_store.h"
#include "basin/launch/local_ranks.h"
#include "basin/launch/node_beat.h"
#include "basin/launch/store_messages.h"

namespace basin::launch {

namespace {

using Clock = std::chrono::steady_clock;

std::string key(const std::string& name) { return "basin-run/" + name; }
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

class StoreCoordinator : public Coordinator {
 public:
  explicit StoreCoordinator(const JobShape& shape) : shape_(shape) {
    try {
      if (coordinating()) server_ = std::make_unique<StoreServer>(shape.master_port);
      // Every operation gives up as a lost node would: a machine that vanished answers nothing, not even a reset.
      store_ = connect(shape, shape.lost_after);
    } catch (const std::exception& error) {
      const std::string port = std::to_string(shape.master_port), why = first_line(error.what());
      throw LaunchError(1, !coordinating() ? "node 0's launcher (at " + address() + ") did not answer within " +
                                                 seconds(shape.join_timeout) + " (--join-timeout): " + why
                           : server_ ? "node 0 hosts the launchers' store on port " + port + " but cannot reach it at " +
                                           address() + " (its --master-addr): " + why
                                     : "node 0 could not host the launchers' store on port " + port + ": " + why);
    }
    join();
  }

  ~StoreCoordinator() override {
    beat_.reset();
    // Node 0 hosts the store: it stays until the nodes that saw the job's end have read it.
    if (!coordinating() || present_at_end_.empty()) return;
    const auto deadline = Clock::now() + shape_.lost_after;
    try {
      for (int node : present_at_end_) {
        while (!store_->check(key("bye/" + std::to_string(node))) && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    } catch (const std::exception&) {
    }
  }

  int first_attempt() override { return first_attempt_; }

  Start start(int attempt) override {
    const std::string n = std::to_string(attempt);
    if (!coordinating()) {
      if (ended_before_join_.empty()) say("ready/" + n);
      Start start = ended_before_join_.empty()
                        ? parse_start(wait_for(key("attempt/" + n), shape_.join_timeout + shape_.last_call + shape_.lost_after))
                        : parse_start(ended_before_join_);
      if (start.run && !start.nodes.empty() &&
          std::find(start.nodes.begin(), start.nodes.end(), shape_.node_rank) == start.nodes.end()) {
        start = {false, 0, 1, "attempt " + n + " started without node " + std::to_string(shape_.node_rank) +
                                  ", which was not there in time; a launcher started again joins the job's next "
                                  "restart, if one comes within its --join-timeout", {}};
      }
      if (!start.run) say("bye");
      return start;
    }
    try {
      set("next", n);
      const auto deadline = Clock::now() + shape_.join_timeout;
      std::optional<Clock::time_point> last_call;  // once min_nodes are there
      std::vector<int> missing;
      while (true) {
        missing.clear();
        for (int node = 1; node < shape_.nnodes; ++node) {  // a launcher alive and waiting for this attempt
          if (!alive(node) || !store_->check(key("ready/" + n + "/" + std::to_string(node)))) missing.push_back(node);
        }
        bool refused = false;
        for (int node : missing) refused = refused || store_->check(key("refused/" + std::to_string(node)));
        if (missing.empty() || refused || Clock::now() > deadline || launcher_interrupted()) break;
        // A restart waits the last call for nodes that may be gone for good; the first attempt, its whole --join-timeout.
        if (enough(missing) && attempt > first_attempt_) {
          if (!last_call) last_call = Clock::now() + shape_.last_call;
          if (Clock::now() > *last_call) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      Start start;
      std::string refusal;
      for (int node : missing) {
        if (refusal.empty()) refusal = get_if_set("refused/" + std::to_string(node));
      }
      if (!refusal.empty()) {
        start = {false, 0, 2, refusal, {}};
      } else if (launcher_interrupted()) {
        start = {false, 0, 130, "node 0's launcher was interrupted before attempt " + n + " started", {}};
      } else if (!missing.empty() && !enough(missing)) {
        start = {false, 0, 1,
                 node_list(missing) + " did not join the job within " +
                     seconds(shape_.join_timeout) + " (--join-timeout), waiting at " + address(), {}};
      }
      if (start.code != 0) {
        present_at_end_.clear();
        for (int node = 1; node < shape_.nnodes; ++node) {
          if (std::find(missing.begin(), missing.end(), node) == missing.end()) present_at_end_.push_back(node);
        }
        set("attempt/" + n, start_text(start));
        return start;
      }
      replaced_.clear();
      attempt_nodes_.clear();
      for (int node = 0; node < shape_.nnodes; ++node) {
        if (std::find(missing.begin(), missing.end(), node) != missing.end()) continue;
        attempt_nodes_.push_back(node);
        if (node > 0) started_incarnation_[node] = incarnation_of(node);
      }
      start.run = true;
      start.port = free_port();
      start.nodes = attempt_nodes_;
      if (!missing.empty()) start.message = without_message(attempt, missing, last_call.has_value());
      set("attempt/" + n, start_text(start));
      return start;
    } catch (const std::exception& error) {
      return {false, 0, 1, "node 0 lost its own store: " + first_line(error.what()), {}};
    }
  }

  std::string stop_reason(int attempt) override {
    if (Clock::now() - last_poll_ < std::chrono::milliseconds(200)) return "";
    last_poll_ = Clock::now();
    try {
      const std::string failed = get_if_set("failed/" + std::to_string(attempt));
      if (!failed.empty()) return parse_failure(failed).what;
      if (!coordinating()) {
        if (!alive(0)) return lost_message(0);  // the others watch node 0 only
        return "";
      }
      for (int node : attempt_nodes_) {
        if (node != 0 && lost(node)) {
          const std::string what = lost_message(node);
          publish_failure(attempt, node, what);
          return what;
        }
      }
    } catch (const std::exception& error) {
      return "lost the launchers' store at " + address() + " (node 0): " + first_line(error.what());
    }
    return "";
  }

  void report_failure(int attempt, const std::string& what) override {
    publish_failure(attempt, shape_.node_rank, what);
  }

  Verdict finish(int attempt, const NodeResult& mine) override {
    const std::string n = std::to_string(attempt);
    try {
      set("end/" + n + "/" + std::to_string(shape_.node_rank), result_text(mine));
      if (!coordinating()) {
        Verdict decided = parse_verdict(wait_for(key("verdict/" + n), std::chrono::hours(24 * 365)));
        if (!decided.restart) say("bye");
        return decided;
      }
      std::vector<NodeResult> results(static_cast<std::size_t>(shape_.nnodes));
      std::vector<bool> known(results.size(), false);
      results[0] = mine;
      known[0] = true;
      for (int node = 1; node < shape_.nnodes; ++node) {  // nodes the attempt ran without have nothing to say
        if (std::find(attempt_nodes_.begin(), attempt_nodes_.end(), node) == attempt_nodes_.end()) {
          known[static_cast<std::size_t>(node)] = true;
        }
      }
      for (bool all = false; !all;) {
        all = true;
        for (int node = 1; node < shape_.nnodes; ++node) {
          if (known[static_cast<std::size_t>(node)]) continue;
          const std::string end = get_if_set("end/" + n + "/" + std::to_string(node));
          if (!end.empty()) {
            results[static_cast<std::size_t>(node)] = parse_result(end);
          } else if (lost(node)) {
            results[static_cast<std::size_t>(node)] = {1, false, false, true, lost_message(node)};
            publish_failure(attempt, node, lost_message(node));
          } else if (launcher_interrupted()) {
            results[static_cast<std::size_t>(node)] = {0, false, true, false, ""};  // not waited for
          } else {
            all = false;
            continue;
          }
          known[static_cast<std::size_t>(node)] = true;
        }
        if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      const std::string failed = get_if_set("failed/" + n);
      const FirstFailure first = failed.empty() ? FirstFailure{} : parse_failure(failed);
      Verdict verdict = decide(attempt, shape_.max_restarts, results, first);
      if (!verdict.restart) {
        present_at_end_.clear();
        for (int node : attempt_nodes_) {
          if (node != 0 && !results[static_cast<std::size_t>(node)].lost) present_at_end_.push_back(node);
        }
      }
      set("verdict/" + n, verdict_text(verdict));
      return verdict;
    } catch (const std::exception& error) {
      return {false, 1, "failed: lost the launchers' store at " + address() + " (node 0): " + first_line(error.what())};
    }
  }

 private:
  bool coordinating() const { return shape_.node_rank == 0; }
  bool enough(const std::vector<int>& missing) const { return shape_.nnodes - int(missing.size()) >= shape_.min_nodes; }
  std::string without_message(int attempt, const std::vector<int>& missing, bool last_call) const {
    const std::string waited = last_call ? "the last call, " + seconds(shape_.last_call) + " (--last-call-timeout)"
                                         : seconds(shape_.join_timeout) + " (--join-timeout)";
    return "attempt " + std::to_string(attempt) + " runs on " + std::to_string(shape_.nnodes - missing.size()) +
           " of " + std::to_string(shape_.nnodes) + " nodes, without " + node_list(missing) +
           " (not there within " + waited + ")";
  }
  std::string address() const { return shape_.master_addr + ":" + std::to_string(shape_.master_port); }
  void set(const std::string& name, const std::string& value) { store_->set(key(name), value); }
  std::string get_if_set(const std::string& name) { return store_->get(key(name)).value_or(""); }

  std::string lost_message(int node) const {
    if (node != 0 && replaced_.count(node) != 0) {
      return "node " + std::to_string(node) + " was lost: a new launcher took its place";
    }
    return "node " + std::to_string(node) + " was lost: its launcher gave no sign of life for " + seconds(shape_.lost_after);
  }

  // Checks this node was started as node 0 was, refuses a node rank whose
  // launcher is alive, learns where the job stands, and starts beating.
  void join() {
    if (!coordinating()) check_shape();
    const int node = shape_.node_rank;
    if (const int64_t previous = incarnation_of(node); previous > 0) {
      const std::string counter = beat_key(node, previous);
      const int64_t before = store_->add(counter, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // a live launcher beats each second
      if (store_->add(counter, 0) != before) {
        throw LaunchError(1, "node rank " + std::to_string(node) +
                                 " is already in the job (its launcher is alive); give each machine its own --node-rank");
      }
    }
    if (!coordinating()) {
      // An attempt already under way went without this node (lost and back): join the next.
      const std::string next = get_if_set("next");
      if (!next.empty()) {
        first_attempt_ = std::stoi(next);
        const std::string verdict = get_if_set("verdict/" + next);
        const std::string decided = get_if_set("attempt/" + next);
        if (verdict.rfind("end", 0) == 0) ended_before_join_ = verdict;  // the job is over
        else if (decided.rfind("end", 0) == 0) ended_before_join_ = decided;
        else if (!decided.empty()) ++first_attempt_;
      }
    }
    const int64_t incarnation = store_->add(key("incarnation/" + std::to_string(node)), 1);
    beat_ = std::make_unique<Beat>(shape_, beat_key(node, incarnation));
    // The others wait for the shape: said only once node 0 beats, a node that
    // reads it never finds node 0 not yet beating (it once took that for lost).
    if (coordinating()) set("shape", nodes_spec(shape_) + " " + std::to_string(shape_.nproc));
  }

  void check_shape() {
    std::string shape;
    for (const auto deadline = Clock::now() + shape_.join_timeout; (shape = get_if_set("shape")).empty();) {
      if (Clock::now() > deadline) throw LaunchError(1, "node 0's launcher at " + address() + " never said the job's shape");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::istringstream fields(shape);
    std::string nodes;
    int nproc = 0;
    fields >> nodes >> nproc;
    if (nodes != nodes_spec(shape_) || nproc != shape_.nproc) {
      const std::string refusal = "node " + std::to_string(shape_.node_rank) + " was started with --nnodes " +
                                  nodes_spec(shape_) + " --nproc-per-node " + std::to_string(shape_.nproc) +
                                  ", node 0 with --nnodes " + nodes + " --nproc-per-node " +
                                  std::to_string(nproc) + ": every node must be started with the same";
      set("refused/" + std::to_string(shape_.node_rank), refusal);  // node 0 ends the job with it
      throw LaunchError(2, refusal);
    }
  }

  int64_t incarnation_of(int node) { return store_->add(key("incarnation/" + std::to_string(node)), 0); }
  static std::string beat_key(int node, int64_t incarnation) {
    return key("beat/" + std::to_string(node) + "/" + std::to_string(incarnation));
  }

  // Whether node's current launcher has beaten within lost_after of this
  // launcher's watch: one not yet beating (not joined, or between its join and
  // its first beat) has the window from the first look, not none (a node 1
  // quicker than node 0 once called it lost at once, "no sign of life for 15 s").
  bool alive(int node) {
    const int64_t incarnation = incarnation_of(node);
    const int64_t count = incarnation == 0 ? 0 : store_->add(beat_key(node, incarnation), 0);
    const auto now = Clock::now();
    Seen& seen = seen_.try_emplace(node, Seen{incarnation, count, now}).first->second;
    if (incarnation != seen.incarnation || count != seen.count) seen = {incarnation, count, now};
    return now - seen.moved < shape_.lost_after;
  }

  // Whether the launcher that started this attempt on node is gone.
  bool lost(int node) {
    if (!alive(node)) return true;
    if (incarnation_of(node) != started_incarnation_[node]) {
      replaced_.insert(node);
      return true;
    }
    return false;
  }

  void publish_failure(int attempt, int node, const std::string& what) {
    try {
      if (store_->add(key("failures/" + std::to_string(attempt)), 1) == 1) {
        set("failed/" + std::to_string(attempt), failure_text(node, what));
      }
    } catch (const std::exception&) {
      // node 0 is gone: this node stops by itself; the failure has nowhere to go
    }
  }

  // Says `what` of this node ("bye", "ready/N") if node 0's store is still there (else this node stops by itself).
  void say(const std::string& what) {
    try {
      set(what + "/" + std::to_string(shape_.node_rank), "1");
    } catch (const std::exception&) {
    }
  }

  // Waits for node 0's word (a key), as long as node 0 lives and no signal asks to stop.
  std::string wait_for(const std::string& name, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    try {
      std::optional<std::string> word;
      while (!(word = store_->get(name))) {
        if (launcher_interrupted()) return "end 130 interrupted";
        if (!alive(0)) throw std::runtime_error(lost_message(0));
        if (Clock::now() > deadline) throw std::runtime_error("node 0 gave no word within " + seconds(limit));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      return *word;
    } catch (const std::exception& error) {
      return "end 1 failed: lost the launchers' store at " + address() + " (node 0): " + first_line(error.what());
    }
  }

  struct Seen {
    int64_t incarnation = 0;
    int64_t count = 0;
    Clock::time_point moved{};
  };

  JobShape shape_;
  std::unique_ptr<StoreServer> server_;  // node 0: the store, outliving the connections to it
  std::unique_ptr<StoreClient> store_;
  std::unique_ptr<Beat> beat_;
  int first_attempt_ = 0;
  std::string ended_before_join_;  // the job's end, when this launcher came after it
  Clock::time_point last_poll_{};
  std::map<int, Seen> seen_;                       // node: its launcher's beats, and when they last moved
  std::map<int, int64_t> started_incarnation_;     // node: the launcher that started the attempt
  std::set<int> replaced_;                         // nodes whose launcher was replaced mid-attempt
  std::vector<int> attempt_nodes_;                 // node 0: the nodes that run this attempt
  std::vector<int> present_at_end_;               // node 0: the other nodes that read the job's end
};

}  // namespace

std::unique_ptr<Coordinator> make_store_coordinator(const JobShape& shape) {
  return std::make_unique<StoreCoordinator>(shape);
}

}  // namespace basin::launch
