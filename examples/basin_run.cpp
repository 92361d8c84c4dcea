// basin-run: starts N local processes of a command as the ranks of one job,
// with the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS). Each output line is
// prefixed with its rank. If a rank fails, the others are stopped; with
// --max-restarts K the job then starts again, at most K times (basin-train
// continues from its newest checkpoint), unless the rank exited with code 2
// (bad input, which a restart cannot mend). Otherwise basin-run exits
// non-zero, naming the rank.
//
//   basin-run --nproc 2 --max-restarts 3 -- basin-train --config examples/configs/synthetic_ddp.json --run-dir runs/job

#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "basin/core/interrupt.h"

namespace {

constexpr int kBadInput = 2;

struct Rank {
  pid_t pid = -1;
  int output = -1;      // read end of the rank's stdout+stderr pipe
  std::string partial;  // an unfinished last line
  bool running = true;
  int status = 0;
};

// A port the OS reports free on loopback now (it may be taken again before
// rank 0 binds it; then rank 0 fails with a clear message).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

void print_lines(int rank, Rank& r, const char* data, std::size_t size, bool flush_partial) {
  r.partial.append(data, size);
  std::size_t start = 0;
  for (std::size_t nl; (nl = r.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::cout << "[rank " << rank << "] " << r.partial.substr(start, nl - start) << '\n';
  }
  r.partial.erase(0, start);
  if (flush_partial && !r.partial.empty()) {
    std::cout << "[rank " << rank << "] " << r.partial << '\n';
    r.partial.clear();
  }
  std::cout.flush();
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

volatile sig_atomic_t interrupted = 0;


/// What the job's ranks share, for every attempt.
struct Job {
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port, chosen anew for each attempt
  double grace_seconds = 5;
  int max_restarts = 0;
  std::vector<std::string> command;
};

/// How one attempt ended: every rank's status, and the first to fail (-1: none).
struct Attempt {
  std::vector<int> statuses;
  int failed = -1;
  std::vector<int> failures;  // every failed rank, in the order seen
};

/// Starts the ranks and waits for them; if one fails, stops the others
/// (SIGTERM, then SIGKILL after the grace). Returns -1 in `failed` and the
/// statuses when every rank ended as asked; throws nothing.
Attempt run_attempt(const Job& job, int restart);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"basin-run: run a command as N local ranks of one job (torchrun-style variables)"};
  Job job;
  app.add_option("--nproc,--nproc-per-node,--nproc_per_node", job.nproc, "Number of processes (ranks)")
      ->required()
      ->check(CLI::Range(1, 1024));
  app.add_option("--master-port,--master_port", job.master_port,
                 "Port of rank 0's rendezvous store (default: a free port)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--master-addr,--master_addr", job.master_addr, "Address of rank 0 (default 127.0.0.1)");
  app.add_option("--grace", job.grace_seconds, "Seconds the other ranks get to stop after one fails, before SIGKILL");
  app.add_option("--max-restarts,--max_restarts", job.max_restarts,
                 "Start the job again, at most this many times, when a rank dies (not on exit code 2)")
      ->check(CLI::Range(0, 1000));
  app.add_option("command", job.command, "The command each rank runs, after --")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kBadInput;
  }

  // Children must be waitable (an inherited SIG_IGN would reap them behind our
  // back); a closed stdout must not kill the launcher while ranks run.
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_IGN);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) signal(s, [](int) { interrupted = 1; });

  for (int restart = 0;; ++restart) {
    const Attempt attempt = run_attempt(job, restart);
    if (attempt.failed < 0) {
      for (int status : attempt.statuses) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == basin::kExitInterrupted) {
          std::cerr << "basin-run: the ranks stopped on a signal after writing a checkpoint; continue with --resume latest"
                    << std::endl;
          return basin::kExitInterrupted;
        }
      }
      if (interrupted) return 130;
      if (restart > 0) std::cerr << "basin-run: the job finished after " << restart << (restart == 1 ? " restart" : " restarts") << std::endl;
      return 0;
    }
    const int status = attempt.statuses[static_cast<std::size_t>(attempt.failed)];
    std::string others;
    for (int rank : attempt.failures) {
      if (rank != attempt.failed) others += "; then rank " + std::to_string(rank) + " " + describe(attempt.statuses[static_cast<std::size_t>(rank)]);
    }
    const bool bad_input = WIFEXITED(status) && WEXITSTATUS(status) == kBadInput;
    if (restart < job.max_restarts && !bad_input && !interrupted) {
      std::cerr << "basin-run: rank " << attempt.failed << " " << describe(status) << others << "; restarting the job ("
                << restart + 1 << " of at most " << job.max_restarts << " restarts)" << std::endl;
      continue;
    }
    std::cerr << "basin-run: failed: rank " << attempt.failed << " " << describe(status) << others;
    if (bad_input && restart < job.max_restarts) std::cerr << " (bad input: not restarted)";
    else if (job.max_restarts > 0 && !interrupted) std::cerr << " (after " << restart << " of " << job.max_restarts << " restarts)";
    std::cerr << std::endl;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
}

namespace {

Attempt run_attempt(const Job& job, int restart) {
  const int nproc = job.nproc;
  const int master_port = job.master_port != 0 ? job.master_port : free_port();
  const std::string& master_addr = job.master_addr;
  const double grace_seconds = job.grace_seconds;
  Attempt attempt;
  std::vector<Rank> ranks;
  auto abandon_start = [&](const char* what) {
    std::cerr << "basin-run: " << what << " failed: " << strerror(errno) << "; stopping the ranks started" << std::endl;
    for (auto& r : ranks) kill(-r.pid, SIGKILL);
    for (auto& r : ranks) waitpid(r.pid, nullptr, 0);
    attempt.statuses.assign(static_cast<std::size_t>(nproc), 0);
    attempt.statuses[0] = 1 << 8;  // exit code 1, charged to rank 0: the job never ran
    attempt.failed = 0;
    attempt.failures = {0};
    return attempt;
  };
  const pid_t launcher = getpid();
  for (int rank = 0; rank < nproc; ++rank) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return abandon_start("pipe");
    const pid_t pid = fork();
    if (pid < 0) return abandon_start("fork");
    if (pid == 0) {
      setpgid(0, 0);  // a group per rank: stopping a rank stops whatever it started
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // and a launcher that dies takes its ranks along
      if (getppid() != launcher) _exit(1);  // it died before prctl took effect
      for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(s, SIG_DFL);
      dup2(pipe_fds[1], STDOUT_FILENO);
      dup2(pipe_fds[1], STDERR_FILENO);
      close(pipe_fds[0]);
      close(pipe_fds[1]);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("GROUP_RANK", "0", 1);  // this node's index: one node
      setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(restart).c_str(), 1);
      setenv("TORCHELASTIC_MAX_RESTARTS", std::to_string(job.max_restarts).c_str(), 1);
      setenv("MASTER_ADDR", master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(master_port).c_str(), 1);
      std::vector<char*> args;
      for (auto& part : job.command) args.push_back(const_cast<char*>(part.c_str()));  // execvp does not write them
      args.push_back(nullptr);
      execvp(args[0], args.data());
      std::fprintf(stderr, "basin-run: cannot run '%s': %s\n", args[0], strerror(errno));
      _exit(127);
    }
    close(pipe_fds[1]);
    setpgid(pid, pid);  // also here, so the group exists before any signal is sent
    ranks.emplace_back();
    ranks.back().pid = pid;
    ranks.back().output = pipe_fds[0];
  }

  int failed = -1;           // the first rank seen to fail
  std::vector<int> failures;  // every failed rank, in the order seen
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::now();
  // Signals go to each rank's process group, exited ranks included: a rank
  // that was a shell may have left its program running.
  auto stop_others = [&](int signal_number) {
    for (auto& r : ranks) kill(-r.pid, signal_number);
  };
  auto all_exited_at = std::chrono::steady_clock::time_point::max();
  while (true) {
    std::vector<pollfd> fds;
    std::vector<int> owners;
    for (int rank = 0; rank < nproc; ++rank) {
      if (ranks[static_cast<std::size_t>(rank)].output >= 0) {
        fds.push_back({ranks[static_cast<std::size_t>(rank)].output, POLLIN, 0});
        owners.push_back(rank);
      }
    }
    bool any_running = false;
    for (auto& r : ranks) any_running = any_running || r.running;
    if (fds.empty() && !any_running) break;
    if (!any_running) {
      // Every rank has exited; output still open belongs to processes they
      // left behind. Drain it briefly, then stop them and close it.
      const auto now = std::chrono::steady_clock::now();
      if (all_exited_at == std::chrono::steady_clock::time_point::max()) all_exited_at = now;
      if (now - all_exited_at > std::chrono::seconds(1)) {
        stop_others(SIGKILL);
        for (int rank = 0; rank < nproc; ++rank) {
          Rank& r = ranks[static_cast<std::size_t>(rank)];
          if (r.output < 0) continue;
          print_lines(rank, r, "", 0, true);
          close(r.output);
          r.output = -1;
        }
        break;
      }
    }
    if (!fds.empty()) poll(fds.data(), fds.size(), 20);
    else usleep(20000);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      Rank& r = ranks[static_cast<std::size_t>(owners[i])];
      char buffer[4096];
      const ssize_t got = read(r.output, buffer, sizeof buffer);
      if (got > 0) {
        print_lines(owners[i], r, buffer, static_cast<std::size_t>(got), false);
      } else {
        print_lines(owners[i], r, "", 0, true);
        close(r.output);
        r.output = -1;
      }
    }
    for (int rank = 0; rank < nproc; ++rank) {
      Rank& r = ranks[static_cast<std::size_t>(rank)];
      if (!r.running) continue;
      const pid_t waited = waitpid(r.pid, &r.status, WNOHANG);
      if (waited == 0) continue;
      if (waited < 0) r.status = 1 << 8;  // ECHILD: it is gone, how is unknown; count it as a failure
      r.running = false;
      // A rank that stopped on a signal after writing its checkpoint ended as asked.
      const bool ok = WIFEXITED(r.status) && (WEXITSTATUS(r.status) == 0 || WEXITSTATUS(r.status) == basin::kExitInterrupted);
      if (!ok) failures.push_back(rank);
      if (!ok && failed < 0 && !stopping) {
        failed = rank;
        std::cerr << "basin-run: rank " << rank << " " << describe(r.status) << "; stopping the other ranks" << std::endl;
        stopping = true;
        stop_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(grace_seconds * 1000));
        stop_others(SIGTERM);
      }
    }
    if (interrupted && !stopping) {
      stopping = true;
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(grace_seconds * 1000));
      stop_others(SIGTERM);
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) stop_others(SIGKILL);
  }
  for (const auto& r : ranks) attempt.statuses.push_back(r.status);
  attempt.failed = failed;
  attempt.failures = failures;
  return attempt;
}

}  // namespace
