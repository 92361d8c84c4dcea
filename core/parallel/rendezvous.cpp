#include "basin/core/parallel/rendezvous.h"

#include <cstdlib>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "basin/core/config_error.h"
#include "basin/core/parallel/communicator.h"

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
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(job.master_port);
  options.isServer = job.rank == 0;
  options.numWorkers = static_cast<std::size_t>(job.world_size);
  options.waitWorkers = true;
  options.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(job.master_addr, options);
  } catch (const std::exception& error) {
    const std::string what = error.what();
    if (job.rank == 0 && what.find("in use") != std::string::npos) {
      throw ConfigError("MASTER_PORT " + std::to_string(job.master_port) + " is already in use on " +
                        job.master_addr + "; choose another port");
    }
    throw std::runtime_error("rank " + std::to_string(job.rank) + " could not meet the job at " + job.master_addr +
                             ":" + std::to_string(job.master_port) + ": " + what.substr(0, what.find('\n')));
  }
  if (cuda && nccl_available()) return make_nccl_communicator(store, job.rank, job.world_size, timeout);
  const bool local = job.master_addr == "localhost" || job.master_addr.rfind("127.", 0) == 0;
  return make_gloo_communicator(store, job.rank, job.world_size, timeout, local);
}

}  // namespace basin
