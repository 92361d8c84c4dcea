#include "launch/coordinator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "basin/core/interrupt.h"

namespace basin::launch {

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out << static_cast<double>(duration.count()) / 1000 << " s";
  return out.str();
}

class SoloCoordinator : public Coordinator {
 public:
  explicit SoloCoordinator(const JobShape& shape) : shape_(shape) {}
  Start start(int) override { return {true, shape_.master_port != 0 ? shape_.master_port : free_port(), 0, ""}; }
  std::string stop_reason(int) override { return ""; }
  void report_failure(int, const std::string&) override {}  // this node's result says it all
  Verdict finish(int attempt, const NodeResult& mine) override { return decide(attempt, shape_.max_restarts, {mine}, ""); }

 private:
  JobShape shape_;
};

/// The launchers meet in node 0's TCPStore. Every launcher counts a beat
/// there each second; a launcher whose count stops moving for lost_after
/// is a lost node (counts, not clocks: the machines' clocks may differ).
/// Keys: node/R (what node R runs), beat/R, next (the attempt a joining
/// node waits for), attempt/N ("run PORT" or "end CODE MESSAGE"),
/// failed/N (the attempt's first failure), end/N/R (node R's result),
/// verdict/N, bye (launchers that read the last verdict).
class StoreCoordinator : public Coordinator {
 public:
  explicit StoreCoordinator(const JobShape& shape) : shape_(shape) {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(shape.master_port);
    options.isServer = coordinating();
    options.waitWorkers = false;
    options.timeout = shape.join_timeout;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(shape.master_addr, options);
    } catch (const std::exception& error) {
      const std::string what = error.what();
      throw std::runtime_error(
          coordinating() ? "node 0 could not host the launchers' store at " + address() + ": " + first_line(what)
                         : "node 0's launcher (at " + address() + ") did not answer within " +
                               seconds(shape.join_timeout) + " (--join-timeout): " + first_line(what));
    }
    join();
  }

  ~StoreCoordinator() override {
    // Node 0 hosts the store: it stays until the others have read the last verdict.
    if (!coordinating() || !ended_) return;
    const auto deadline = Clock::now() + shape_.lost_after;
    try {
      while (store_->add(key("bye"), 0) < present_at_end_ - 1 && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } catch (const std::exception&) {
    }
  }

  int first_attempt() override { return first_attempt_; }

  Start start(int attempt) override {
    if (!coordinating()) {
      const Start start = parse_start(wait_for(key("attempt/" + std::to_string(attempt)), shape_.join_timeout + shape_.lost_after));
      if (!start.run) say_bye();
      return start;
    }
    set(key("next"), std::to_string(attempt));
    const auto deadline = Clock::now() + shape_.join_timeout;
    std::vector<int> missing;
    while (true) {
      beat();
      missing.clear();
      for (int node = 1; node < shape_.nnodes; ++node) {
        if (!alive(node)) missing.push_back(node);
      }
      if (missing.empty() || Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    Start start;
    if (!missing.empty()) {
      start.code = 1;
      start.message = "node" + std::string(missing.size() > 1 ? "s " : " ") + join_numbers(missing) +
                      (missing.size() > 1 ? " did" : " did") + " not join the job within " +
                      seconds(shape_.join_timeout) + " (--join-timeout), waiting at " + address();
    } else {
      start.message = disagreement();
      start.code = start.message.empty() ? 0 : 2;
    }
    if (start.code != 0) {
      ended_ = true;
      present_at_end_ = shape_.nnodes - static_cast<int>(missing.size());
      set(key("attempt/" + std::to_string(attempt)), "end " + std::to_string(start.code) + " " + start.message);
      return start;
    }
    start.run = true;
    start.port = free_port();
    set(key("attempt/" + std::to_string(attempt)), "run " + std::to_string(start.port));
    return start;
  }

  std::string stop_reason(int attempt) override {
    if (Clock::now() - last_poll_ < std::chrono::milliseconds(200)) return "";
    last_poll_ = Clock::now();
    try {
      beat();
      const std::string failed = key("failed/" + std::to_string(attempt));
      if (store_->check({failed})) return text(store_->get(failed));
      for (int node = 0; node < shape_.nnodes; ++node) {
        if (node == shape_.node_rank || (!coordinating() && node != 0)) continue;  // the others watch node 0 only
        if (!alive(node)) {
          const std::string what = lost_message(node);
          report_failure(attempt, what);
          return what;
        }
      }
    } catch (const std::exception& error) {
      return "lost the launchers' store at " + address() + " (node 0): " + first_line(error.what());
    }
    return "";
  }

  void report_failure(int attempt, const std::string& what) override {
    try {
      if (store_->add(key("failures/" + std::to_string(attempt)), 1) == 1) {
        set(key("failed/" + std::to_string(attempt)), what);
      }
    } catch (const std::exception&) {
      // node 0 is gone: this node stops by itself; the failure has nowhere to go
    }
  }

  Verdict finish(int attempt, const NodeResult& mine) override {
    const std::string n = std::to_string(attempt);
    try {
      set(key("end/" + n + "/" + std::to_string(shape_.node_rank)), encode(mine));
      if (!coordinating()) {
        const std::string verdict = wait_for(key("verdict/" + n), std::chrono::hours(24 * 365));
        Verdict decided = parse_verdict(verdict);
        if (!decided.restart) say_bye();
        return decided;
      }
      std::vector<NodeResult> results(static_cast<std::size_t>(shape_.nnodes));
      std::vector<bool> known(results.size(), false);
      results[static_cast<std::size_t>(shape_.node_rank)] = mine;
      known[static_cast<std::size_t>(shape_.node_rank)] = true;
      for (bool all = false; !all;) {
        beat();
        all = true;
        for (int node = 0; node < shape_.nnodes; ++node) {
          if (known[static_cast<std::size_t>(node)]) continue;
          const std::string end = key("end/" + n + "/" + std::to_string(node));
          if (store_->check({end})) {
            results[static_cast<std::size_t>(node)] = decode(text(store_->get(end)));
            known[static_cast<std::size_t>(node)] = true;
          } else if (!alive(node)) {
            results[static_cast<std::size_t>(node)] = {1, false, false, true, lost_message(node)};
            known[static_cast<std::size_t>(node)] = true;
            report_failure(attempt, lost_message(node));
          } else {
            all = false;
          }
        }
        if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      const std::string failed = key("failed/" + n);
      const std::string first = store_->check({failed}) ? text(store_->get(failed)) : "";
      Verdict verdict = decide(attempt, shape_.max_restarts, results, first);
      if (!verdict.restart) {
        ended_ = true;
        present_at_end_ = 0;
        for (const auto& result : results) present_at_end_ += result.lost ? 0 : 1;
      }
      set(key("verdict/" + n), (verdict.restart ? "restart " : "end ") + std::to_string(verdict.code) + " " + verdict.message);
      return verdict;
    } catch (const std::exception& error) {
      return {false, 1, "failed: lost the launchers' store at " + address() + " (node 0): " + first_line(error.what())};
    }
  }

 private:
  bool coordinating() const { return shape_.node_rank == 0; }
  std::string address() const { return shape_.master_addr + ":" + std::to_string(shape_.master_port); }
  static std::string key(const std::string& name) { return "basin-run/" + name; }
  static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }
  static std::string text(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
  void set(const std::string& name, const std::string& value) {
    store_->set(name, std::vector<uint8_t>(value.begin(), value.end()));
  }

  std::string lost_message(int node) const {
    return "node " + std::to_string(node) + " was lost: its launcher gave no sign of life for " + seconds(shape_.lost_after);
  }

  static std::string join_numbers(const std::vector<int>& numbers) {
    std::string joined;
    for (int n : numbers) joined += (joined.empty() ? "" : ", ") + std::to_string(n);
    return joined;
  }

  // Registers this node, refusing a node rank whose launcher is alive.
  void join() {
    const std::string mine = key("beat/" + std::to_string(shape_.node_rank));
    const int64_t before = store_->add(mine, 0);
    if (before > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // a live launcher beats each second
      if (store_->add(mine, 0) != before) {
        throw std::runtime_error("node rank " + std::to_string(shape_.node_rank) +
                                 " is already in the job (its launcher is alive); give each machine its own --node-rank");
      }
    }
    // Before this node's first beat, no attempt can start counting on it: one
    // already decided went without it (a node lost and back), so it joins the next.
    if (!coordinating() && store_->check({key("next")})) {
      first_attempt_ = std::stoi(text(store_->get(key("next"))));
      if (store_->check({key("attempt/" + std::to_string(first_attempt_))})) ++first_attempt_;
    }
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    set(key("node/" + std::to_string(shape_.node_rank)),
        std::to_string(shape_.nnodes) + " " + std::to_string(shape_.nproc) + " " + host);
    store_->add(mine, 1);
    last_beat_ = Clock::now();
  }

  void say_bye() {
    try {
      store_->add(key("bye"), 1);
    } catch (const std::exception&) {
    }
  }

  void beat() {
    if (Clock::now() - last_beat_ < std::chrono::seconds(1)) return;
    store_->add(key("beat/" + std::to_string(shape_.node_rank)), 1);
    last_beat_ = Clock::now();
  }

  // Whether node's launcher has joined and beaten within lost_after.
  bool alive(int node) {
    const int64_t count = store_->add(key("beat/" + std::to_string(node)), 0);
    auto& seen = seen_[node];
    if (count != seen.first) seen = {count, Clock::now()};
    return count > 0 && Clock::now() - seen.second < shape_.lost_after;
  }

  // "" when every node runs the job node 0 runs, else what differs.
  std::string disagreement() {
    for (int node = 1; node < shape_.nnodes; ++node) {
      std::istringstream fields(text(store_->get(key("node/" + std::to_string(node)))));
      int nnodes = 0, nproc = 0;
      std::string host;
      fields >> nnodes >> nproc >> host;
      if (nnodes != shape_.nnodes || nproc != shape_.nproc) {
        return "node " + std::to_string(node) + " (" + host + ") was started with --nnodes " + std::to_string(nnodes) +
               " --nproc-per-node " + std::to_string(nproc) + ", node 0 with --nnodes " + std::to_string(shape_.nnodes) +
               " --nproc-per-node " + std::to_string(shape_.nproc) + ": every node must be started with the same";
      }
    }
    return "";
  }

  // Waits for a key, beating, as long as node 0 lives.
  std::string wait_for(const std::string& name, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    try {
      while (!store_->check({name})) {
        beat();
        if (!coordinating() && !alive(0)) throw std::runtime_error(lost_message(0));
        if (Clock::now() > deadline) {
          throw std::runtime_error("node 0 gave no word within " + seconds(limit));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      return text(store_->get(name));
    } catch (const std::exception& error) {
      return "end 1 failed: lost the launchers' store at " + address() + " (node 0): " + first_line(error.what());
    }
  }

  static Start parse_start(const std::string& decided) {
    std::istringstream fields(decided);
    std::string kind;
    Start start;
    fields >> kind;
    if (kind == "run") {
      start.run = true;
      fields >> start.port;
      return start;
    }
    fields >> start.code;
    std::getline(fields >> std::ws, start.message);
    return start;
  }

  static Verdict parse_verdict(const std::string& decided) {
    std::istringstream fields(decided);
    std::string kind;
    Verdict verdict;
    fields >> kind >> verdict.code;
    verdict.restart = kind == "restart";
    std::getline(fields >> std::ws, verdict.message);
    return verdict;
  }

  static std::string encode(const NodeResult& r) {
    return std::to_string(r.code) + " " + (r.bad_input ? "1" : "0") + " " + (r.interrupted ? "1" : "0") + " " + r.what;
  }
  static NodeResult decode(const std::string& encoded) {
    std::istringstream fields(encoded);
    NodeResult r;
    int bad_input = 0, interrupted = 0;
    fields >> r.code >> bad_input >> interrupted;
    r.bad_input = bad_input != 0;
    r.interrupted = interrupted != 0;
    std::getline(fields >> std::ws, r.what);
    return r;
  }

  JobShape shape_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  int first_attempt_ = 0;
  Clock::time_point last_beat_{};
  Clock::time_point last_poll_{};
  std::map<int, std::pair<int64_t, Clock::time_point>> seen_;  // node: its beat count, and when it last moved
  bool ended_ = false;
  int present_at_end_ = 0;
};

}  // namespace

Verdict decide(int attempt, int max_restarts, const std::vector<NodeResult>& results, const std::string& first_failure) {
  const NodeResult* failing = nullptr;
  bool interrupted = false, checkpointed = false;
  for (const auto& r : results) {
    interrupted = interrupted || r.interrupted;
    checkpointed = checkpointed || r.code == basin::kExitInterrupted;
    const bool failed = r.lost || (r.code != 0 && r.code != basin::kExitInterrupted);
    if (failed && (failing == nullptr || r.what == first_failure)) failing = &r;
  }
  Verdict verdict;
  if (failing != nullptr) {
    const std::string what = first_failure.empty() ? failing->what : first_failure;
    verdict.code = failing->code;
    if (attempt < max_restarts && !failing->bad_input && !interrupted) {
      verdict.restart = true;
      verdict.message = what + "; restarting the job (" + std::to_string(attempt + 1) + " of at most " +
                        std::to_string(max_restarts) + " restarts)";
      return verdict;
    }
    verdict.message = "failed: " + what;
    if (failing->bad_input && attempt < max_restarts) verdict.message += " (bad input: not restarted)";
    else if (max_restarts > 0 && !interrupted) {
      verdict.message += " (after " + std::to_string(attempt) + " of " + std::to_string(max_restarts) + " restarts)";
    }
    return verdict;
  }
  if (checkpointed) {
    return {false, basin::kExitInterrupted,
            "the ranks stopped on a signal after writing a checkpoint; continue with --resume latest"};
  }
  if (interrupted) return {false, 130, ""};
  if (attempt > 0) {
    return {false, 0, "the job finished after " + std::to_string(attempt) + (attempt == 1 ? " restart" : " restarts")};
  }
  return {false, 0, ""};
}

std::unique_ptr<Coordinator> make_coordinator(const JobShape& shape) {
  if (shape.nnodes == 1) return std::make_unique<SoloCoordinator>(shape);
  return std::make_unique<StoreCoordinator>(shape);
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

}  // namespace basin::launch
