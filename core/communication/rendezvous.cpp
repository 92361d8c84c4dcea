#include "basin/core/communication/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

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

}  // namespace

bool in_multi_process_job() {
  const char* world = variable("WORLD_SIZE");
  return world != nullptr && std::string(world) != "1" && std::string(world) != "";
}

JobEnvironment read_job_environment() {
  JobEnvironment job;
  if (!in_multi_process_job()) return job;
  job.world_size = integer_variable("WORLD_SIZE", 1, 1 << 20);
  job.rank = integer_variable("RANK", 0, 1 << 20);
  if (job.rank >= job.world_size) {
    throw ConfigError("environment variables RANK=" + std::to_string(job.rank) + " and WORLD_SIZE=" +
                      std::to_string(job.world_size) + " are inconsistent: RANK must be below WORLD_SIZE");
  }
  job.local_rank = variable("LOCAL_RANK") != nullptr ? integer_variable("LOCAL_RANK", 0, 1 << 20) : job.rank;
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
