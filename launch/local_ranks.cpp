#include "basin/launch/local_ranks.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "basin/core/base/interrupt.h"

namespace basin::launch {

namespace {

volatile sig_atomic_t interrupted = 0;

struct Rank {
  pid_t pid = -1;
  int output = -1;      // read end of the rank's stdout+stderr pipe
  std::string partial;  // an unfinished last line
  bool running = true;
  int status = 0;
};

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

// What a rank's process is given: its arguments and its environment (this
// process's, with the job's variables set), built before fork. The child of a
// threaded process (node 0's launcher hosts the launchers' store) may only make
// async-signal-safe calls before exec: no malloc, no setenv.
struct Exec {
  std::vector<std::string> storage;
  std::vector<char*> argv, envp;

  Exec(const LocalRanks& plan, int local_rank) {
    const std::vector<std::pair<std::string, std::string>> job = {
        {"RANK", std::to_string(plan.first_rank + local_rank)},
        {"LOCAL_RANK", std::to_string(local_rank)},
        {"WORLD_SIZE", std::to_string(plan.world_size)},
        {"LOCAL_WORLD_SIZE", std::to_string(plan.nproc)},
        {"GROUP_RANK", std::to_string(plan.group_rank)},
        {"BASIN_ELASTIC", plan.elastic},
        {"TORCHELASTIC_RESTART_COUNT", std::to_string(plan.restart)},
        {"TORCHELASTIC_MAX_RESTARTS", std::to_string(plan.max_restarts)},
        {"MASTER_ADDR", plan.master_addr},
        {"MASTER_PORT", std::to_string(plan.master_port)}};
    std::vector<std::string> environment;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string text = *entry;
      bool replaced = false;
      for (const auto& [name, value] : job) replaced = replaced || text.rfind(name + "=", 0) == 0;
      if (!replaced) environment.push_back(text);
    }
    for (const auto& [name, value] : job) environment.push_back(name + "=" + value);
    storage = plan.command;
    storage.insert(storage.end(), environment.begin(), environment.end());
    for (std::size_t i = 0; i < storage.size(); ++i) {
      (i < plan.command.size() ? argv : envp).push_back(storage[i].data());
    }
    argv.push_back(nullptr);
    envp.push_back(nullptr);
  }
};

[[noreturn]] void exec_rank(const Exec& exec, pid_t launcher, int output) {
  setpgid(0, 0);                     // a group per rank: stopping a rank stops whatever it started
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // and a launcher that dies takes its ranks along
  if (getppid() != launcher) _exit(1);  // it died before the rank could ask to die with it
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(s, SIG_DFL);
  dup2(output, STDOUT_FILENO);
  dup2(output, STDERR_FILENO);
  close(output);
  execvpe(exec.argv[0], exec.argv.data(), exec.envp.data());
  const char* why = strerror(errno);  // glibc's is safe enough here: a static table for errno's values
  const char* parts[] = {"basin-run: cannot run '", exec.argv[0], "': ", why, "\n"};
  for (const char* part : parts) (void)!write(STDERR_FILENO, part, strlen(part));
  _exit(127);
}

}  // namespace

std::string rank_name(const LocalRanks& plan, int local_rank) {
  std::string name = "rank " + std::to_string(plan.first_rank + local_rank);
  if (plan.world_size > plan.nproc) name += " (node " + std::to_string(plan.node_rank) + ")";
  return name;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

bool launcher_interrupted() { return interrupted != 0; }

void install_launcher_signals() {
  // Children must be waitable (an inherited SIG_IGN would reap them behind our
  // back); a closed stdout must not kill the launcher while ranks run.
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_IGN);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) signal(s, [](int) { interrupted = 1; });
}

LocalOutcome run_local_ranks(const LocalRanks& plan, const StopCheck& stop_check, const FailureReport& report) {
  const int nproc = plan.nproc;
  LocalOutcome outcome;
  std::vector<Rank> ranks;
  auto abandon_start = [&](const char* what) {
    std::cerr << "basin-run: " << what << " failed: " << strerror(errno) << "; stopping the ranks started" << std::endl;
    for (auto& r : ranks) kill(-r.pid, SIGKILL);
    for (auto& r : ranks) waitpid(r.pid, nullptr, 0);
    outcome.statuses.assign(static_cast<std::size_t>(nproc), 0);
    outcome.statuses[0] = 1 << 8;  // exit code 1, charged to local rank 0: the job never ran here
    outcome.failed = 0;
    outcome.failures = {0};
    report(rank_name(plan, 0) + " could not be started");
    return outcome;
  };
  const pid_t launcher = getpid();
  for (int rank = 0; rank < nproc; ++rank) {
    const Exec exec(plan, rank);
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return abandon_start("pipe");
    const pid_t pid = fork();
    if (pid < 0) return abandon_start("fork");
    if (pid == 0) {
      close(pipe_fds[0]);
      exec_rank(exec, launcher, pipe_fds[1]);
    }
    close(pipe_fds[1]);
    setpgid(pid, pid);  // also here, so the group exists before any signal is sent
    ranks.emplace_back();
    ranks.back().pid = pid;
    ranks.back().output = pipe_fds[0];
  }

  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::now();
  // Signals go to each rank's process group, exited ranks included: a rank
  // that was a shell may have left its program running.
  auto signal_all = [&](int signal_number) {
    for (auto& r : ranks) kill(-r.pid, signal_number);
  };
  auto stop_all = [&] {
    stopping = true;
    stop_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(plan.grace_seconds * 1000));
    signal_all(SIGTERM);
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
        signal_all(SIGKILL);
        for (int rank = 0; rank < nproc; ++rank) {
          Rank& r = ranks[static_cast<std::size_t>(rank)];
          if (r.output < 0) continue;
          print_lines(plan.first_rank + rank, r, "", 0, true);
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
        print_lines(plan.first_rank + owners[i], r, buffer, static_cast<std::size_t>(got), false);
      } else {
        print_lines(plan.first_rank + owners[i], r, "", 0, true);
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
      if (!ok) outcome.failures.push_back(rank);
      if (!ok && outcome.failed < 0 && !stopping) {
        outcome.failed = rank;
        const std::string what = rank_name(plan, rank) + " " + describe_status(r.status);
        std::cerr << "basin-run: " << what << "; stopping the other ranks" << std::endl;
        report(what);
        stop_all();
      }
    }
    if (!stopping && any_running && interrupted) {
      stop_all();  // the ranks checkpoint and exit 75: the signal's own outcome, not a stop from outside
    } else if (!stopping && any_running) {
      const std::string reason = stop_check();
      if (!reason.empty()) {
        std::cerr << "basin-run: " << reason << "; stopping this node's ranks" << std::endl;
        outcome.stopped_because = reason;
        stop_all();
      }
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) signal_all(SIGKILL);
  }
  for (const auto& r : ranks) outcome.statuses.push_back(r.status);
  return outcome;
}

}  // namespace basin::launch
