#include "basin/launch/coordinator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

#include "basin/core/base/interrupt.h"

namespace basin::launch {

namespace {

class SoloCoordinator : public Coordinator {
 public:
  explicit SoloCoordinator(const JobShape& shape) : shape_(shape) {}
  Start start(int) override { return {true, shape_.master_port != 0 ? shape_.master_port : free_port(), 0, "", {}}; }
  std::string stop_reason(int) override { return ""; }
  void report_failure(int, const std::string&) override {}  // this node's result says it all
  Verdict finish(int attempt, const NodeResult& mine) override { return decide(attempt, shape_.max_restarts, {mine}, {}); }

 private:
  JobShape shape_;
};

}  // namespace

Verdict decide(int attempt, int max_restarts, const std::vector<NodeResult>& results, const FirstFailure& first) {
  auto failed = [](const NodeResult& r) { return r.lost || (r.code != 0 && r.code != basin::kExitInterrupted); };
  bool interrupted = false, checkpointed = false;
  const NodeResult* failing = nullptr;
  for (const auto& r : results) {
    interrupted = interrupted || r.interrupted;
    checkpointed = checkpointed || r.code == basin::kExitInterrupted;
    if (failing == nullptr && failed(r)) failing = &r;
  }
  NodeResult reported;
  if (first.node >= 0 && first.node < static_cast<int>(results.size())) {
    reported = results[static_cast<std::size_t>(first.node)];
    if (!failed(reported)) reported.code = 1;  // its ranks were stopped before they could fail: still a failure
    reported.what = first.what;
    failing = &reported;
  }
  Verdict verdict;
  if (failing != nullptr) {
    const std::string& what = failing->what;
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

std::string nodes_spec(const JobShape& shape) {
  const std::string most = std::to_string(shape.nnodes);
  return shape.min_nodes == shape.nnodes ? most : std::to_string(shape.min_nodes) + ":" + most;
}

void parse_nodes_spec(const std::string& text, JobShape& shape) {
  const auto number = [&](const std::string& part) {
    if (part.empty() || part.size() > 4 || part.find_first_not_of("0123456789") != std::string::npos) {
      throw std::invalid_argument("--nnodes " + text + ": expected N or MIN:MAX, whole numbers from 1 to 1024");
    }
    return std::stoi(part);
  };
  const auto colon = text.find(':');
  const int fewest = number(text.substr(0, colon));
  const int most = colon == std::string::npos ? fewest : number(text.substr(colon + 1));
  if (fewest < 1 || most > 1024 || fewest > most) {
    throw std::invalid_argument("--nnodes " + text + ": expected N or MIN:MAX with 1 <= MIN <= MAX <= 1024");
  }
  shape.min_nodes = fewest;
  shape.nnodes = most;
}

std::unique_ptr<Coordinator> make_coordinator(const JobShape& shape) {
  if (shape.nnodes == 1) return std::make_unique<SoloCoordinator>(shape);
  return make_store_coordinator(shape);
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
