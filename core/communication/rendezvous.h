#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace basin {

class Communicator;

/// Where this process sits in a job, as torchrun and cluster launchers say
/// it: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; or, where
/// WORLD_SIZE is absent, as Slurm's srun says it: SLURM_PROCID,
/// SLURM_NTASKS, SLURM_LOCALID, the first host of SLURM_JOB_NODELIST (unless
/// MASTER_ADDR is set) and MASTER_PORT, else 15000 plus SLURM_JOB_ID's last
/// four digits.
struct JobEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

/// Reads the job variables. A single process needs none of them; a job
/// needs all but LOCAL_RANK (SLURM_LOCALID). Missing, malformed or inconsistent values
/// (RANK >= WORLD_SIZE, ...) throw ConfigError naming the variable.
JobEnvironment read_job_environment();

/// True when the environment describes a job of more than one process.
bool in_multi_process_job();

/// Meets the other ranks through a TCPStore hosted by rank 0 at
/// MASTER_ADDR:MASTER_PORT and returns a communicator over them. Fails
/// after `timeout` rather than waiting for a rank that never comes; a port
/// already in use is a ConfigError naming it.
/// CUDA training uses NCCL where the build has it; everything else Gloo.
std::shared_ptr<Communicator> connect_job(const JobEnvironment& job, std::chrono::milliseconds timeout,
                                          bool cuda = false);

}  // namespace basin
