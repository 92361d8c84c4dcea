#include "basin/core/communication/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "basin/core/base/torch_compat.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/communication/peer_watch.h"
#include "basin/core/communication/watched_communicator.h"
#include "basin/core/config/config_error.h"

namespace basin {

namespace {

const char* variable(const char* name) { return std::getenv(name); }

int integer_variable(const char* name, int min, int max) {
  const char* text = variable(name);
  if (text == nullptr) throw ConfigError(std::string("environment variable ") + name + " is not set");
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < min || value > max) {
    throw ConfigError(std::string("environment variable ") + name + "='" + text + "': expected an integer in [" +
                      std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<int>(value);
}

// The address of this machine's interface that packets to `master_addr`
// leave from: the one the other ranks can reach this rank at too (a UDP
// connect sends nothing; it only picks the route).
std::string address_towards(const std::string& master_addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* found = nullptr;
  if (getaddrinfo(master_addr.c_str(), "9", &hints, &found) != 0 || found == nullptr) {
    throw ConfigError("MASTER_ADDR '" + master_addr + "' does not resolve to an address");
  }
  std::string address;
  // IPv4 first, as Gloo's own lookups prefer; then whatever else resolves.
  for (const int family : {AF_INET, AF_INET6}) {
    for (const addrinfo* candidate = found; candidate != nullptr && address.empty(); candidate = candidate->ai_next) {
      if (candidate->ai_family != family) continue;
      const int fd = socket(candidate->ai_family, SOCK_DGRAM, 0);
      sockaddr_storage local{};
      socklen_t length = sizeof local;
      if (fd >= 0 && connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 &&
          getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
        char text[INET6_ADDRSTRLEN] = "";
        const void* raw = local.ss_family == AF_INET
                              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
        if (inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr) address = text;
      }
      if (fd >= 0) close(fd);
    }
  }
  freeaddrinfo(found);
  if (address.empty()) throw ConfigError("no network route from this machine to MASTER_ADDR '" + master_addr + "'");
  return address;
}

// GLOO_SOCKET_IFNAME names the interface, as in PyTorch; else the one the
// route to MASTER_ADDR leaves from (loopback for a job on one machine).
GlooDevice gloo_device(const std::string& master_addr) {
  GlooDevice device;
  const char* interface = variable("GLOO_SOCKET_IFNAME");
  if (interface != nullptr && *interface != '\0') {
    device.interface = interface;
    return device;
  }
  device.address = address_towards(master_addr);
  return device;
}

bool several(const char* count) { return count != nullptr && std::string(count) != "1" && std::string(count) != ""; }

// Slurm's srun, one task per rank, says where a task sits in these instead;
// they are read only where torchrun's are absent (one torchrun per node
// under srun sets its own), as Lightning does.
bool in_slurm_job() {
  if (variable("WORLD_SIZE") != nullptr) return false;
  const char* step_tasks = variable("SLURM_STEP_NUM_TASKS");
  return step_tasks != nullptr ? several(step_tasks) : several(variable("SLURM_NTASKS"));
}

/// The first host of a Slurm node list: "gpu[003-004,010],cpu1" gives
/// "gpu003", "r[1-2]n[01-04]" gives "r1n01" (each bracket's first value).
std::string first_host(const std::string& nodes, const char* name) {
  std::string host;
  for (std::size_t at = 0; at < nodes.size() && nodes[at] != ',';) {
    if (nodes[at] != '[') {
      host += nodes[at++];
      continue;
    }
    const std::size_t close = nodes.find(']', at);
    if (close == std::string::npos) throw ConfigError(std::string("environment variable ") + name + "='" + nodes + "': an unclosed '['");
    const std::string range = nodes.substr(at + 1, close - at - 1);
    host += range.substr(0, range.find_first_of("-,"));
    at = close + 1;
  }
  return host;
}

/// A job's rank, world size and local rank (the rank where it is not set), from the variables named.
JobEnvironment ranks_from(const char* rank_name, const char* world_name, const char* local_name) {
  JobEnvironment job;
  job.world_size = integer_variable(world_name, 1, 1 << 20);
  job.rank = integer_variable(rank_name, 0, 1 << 20);
  if (job.rank >= job.world_size) {
    throw ConfigError(std::string("environment variables ") + rank_name + "=" + std::to_string(job.rank) + " and " +
                      world_name + "=" + std::to_string(job.world_size) + " are inconsistent: " + rank_name +
                      " must be below " + world_name);
  }
  job.local_rank = variable(local_name) != nullptr ? integer_variable(local_name, 0, 1 << 20) : job.rank;
  return job;
}

JobEnvironment read_slurm_environment() {
  // Within a step that runs on part of the allocation (srun -n, -w), the step's tasks and nodes.
  const bool step = variable("SLURM_STEP_NUM_TASKS") != nullptr;
  JobEnvironment job = ranks_from("SLURM_PROCID", step ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS", "SLURM_LOCALID");
  const char* addr = variable("MASTER_ADDR");
  if (addr != nullptr && *addr != '\0') {
    job.master_addr = addr;
  } else {
    const char* name = variable("SLURM_STEP_NODELIST") != nullptr ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    const char* nodes = variable(name);
    if (nodes == nullptr || *nodes == '\0') {
      throw ConfigError("environment variables MASTER_ADDR and SLURM_JOB_NODELIST are not set: a Slurm job's "
                        "first node hosts the store");
    }
    job.master_addr = first_host(nodes, name);
  }
  if (variable("MASTER_PORT") != nullptr) {
    job.master_port = integer_variable("MASTER_PORT", 1, 65535);
  } else {
    // One port per job, the same on every node: 15000 plus the job id's last four digits (as Lightning).
    const char* id = variable("SLURM_JOB_ID");
    const std::string digits = id != nullptr ? id : "";
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
      throw ConfigError("environment variable SLURM_JOB_ID='" + digits + "': expected the job's number (or set MASTER_PORT)");
    }
    job.master_port = 15000 + std::stoi(digits.substr(digits.size() - std::min<std::size_t>(4, digits.size())));
  }
  return job;
}

}  // namespace

bool in_multi_process_job() { return several(variable("WORLD_SIZE")) || in_slurm_job(); }

JobEnvironment read_job_environment() {
  JobEnvironment job;
  if (!in_multi_process_job()) return job;
  if (in_slurm_job()) return read_slurm_environment();
  job = ranks_from("RANK", "WORLD_SIZE", "LOCAL_RANK");
  const char* addr = variable("MASTER_ADDR");
  if (addr == nullptr || std::string(addr).empty()) throw ConfigError("environment variable MASTER_ADDR is not set");
  job.master_addr = addr;
  job.master_port = integer_variable("MASTER_PORT", 1, 65535);
  return job;
}

std::shared_ptr<Communicator> connect_job(const JobEnvironment& job, std::chrono::milliseconds timeout, bool cuda) {
  // torchrun's agent on node 0 hosts the store itself at MASTER_PORT and
  // says so (TORCHELASTIC_USE_AGENT_STORE=True): every rank is then a client,
  // under a prefix of its own per attempt, as PyTorch's ranks are.
  const char* agent_variable = variable("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent_variable != nullptr && std::string(agent_variable) == "True";
  const char* restart = variable("TORCHELASTIC_RESTART_COUNT");
  const std::string prefix = "/worker/attempt_" + std::string(restart != nullptr ? restart : "0");
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(job.master_port);
  options.isServer = job.rank == 0 && !agent_store;
  options.numWorkers = static_cast<std::size_t>(job.world_size);
  options.waitWorkers = !agent_store;
  options.timeout = timeout;
#if !BASIN_TORCH_AT_LEAST(2, 0)
  // LibTorch 1.x's store client cannot talk to torchrun 2.x's store: its
  // server drops the connection at the client's first request, and the
  // client waits for the answer until its timeout. A short probe says so in
  // seconds.
  if (agent_store) {
    c10d::TCPStoreOptions probe = options;
    probe.timeout = std::chrono::seconds(10);
    try {
      // A set goes unanswered; the get that follows is where a 2.x store fails the client.
      c10d::TCPStore store(job.master_addr, probe);
      const std::string key = "basin/probe/" + std::to_string(job.rank);
      store.set(key, {1});
      store.get(key);
    } catch (const std::exception& error) {
      const std::string what = error.what();
      throw ConfigError(
          "torchrun's store at " + job.master_addr + ":" + std::to_string(job.master_port) + " does not answer " +
          "this build's LibTorch " + compat::torch_version() + " (torchrun 2.x's store drops the requests of 1.x clients): launch with "
          "basin-run, or under torchrun set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 and use --standalone or "
          "--rdzv-backend c10d, or build against PyPI's LibTorch (BASIN_LIBTORCH=pypi). The store said: " +
          what.substr(0, what.find('\n')));
    }
  }
#endif
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(job.master_addr, options);
    if (agent_store) store = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  } catch (const std::exception& error) {
    const std::string what = error.what();
    if (options.isServer && what.find("in use") != std::string::npos) {
      throw ConfigError("MASTER_PORT " + std::to_string(job.master_port) + " is already in use on " +
                        job.master_addr + "; choose another port");
    }
    throw std::runtime_error("rank " + std::to_string(job.rank) + " could not meet the job at " + job.master_addr +
                             ":" + std::to_string(job.master_port) + ": " + what.substr(0, what.find('\n')));
  }
  std::shared_ptr<Communicator> communicator =
      cuda && nccl_available() ? make_nccl_communicator(store, job.rank, job.world_size, timeout)
                               : make_gloo_communicator(store, job.rank, job.world_size, timeout, gloo_device(job.master_addr));
  // The watch's own connection to the store, quick to give up: when rank 0
  // is the rank that stopped answering, its store does not answer either.
  c10d::TCPStoreOptions watch_options;
  watch_options.port = options.port;
  watch_options.isServer = false;
  watch_options.waitWorkers = false;
  watch_options.timeout = std::chrono::seconds(3);
  c10::intrusive_ptr<c10d::Store> watch_store = c10::make_intrusive<c10d::TCPStore>(job.master_addr, watch_options);
  if (agent_store) watch_store = c10::make_intrusive<c10d::PrefixStore>(prefix, watch_store);
  auto watch = std::make_shared<PeerWatch>(watch_store, job.rank, job.world_size);
  return watch_collectives(std::move(communicator), std::move(watch), timeout);
}

}  // namespace basin
