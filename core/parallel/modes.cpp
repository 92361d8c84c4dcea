// Every parallel mode, registered: a new mode is its folder (its strategy)
// plus its line in modes()'s table; make_strategy reads the config's
// "parallel" section, but for "activation_checkpointing" (the trainer's).
#include "basin/core/parallel/distributed_strategy.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "basin/core/communication/communicator.h"
#include "basin/core/communication/rendezvous.h"
#include "basin/core/parallel/ddp/data_parallel_strategy.h"
#include "basin/core/parallel/zero/zero_strategy.h"
#include "basin/core/parallel/zero3/fully_sharded_options.h"
#include "basin/core/parallel/zero3/zero3_strategy.h"

namespace basin {

namespace {

/// One process alone: "none", or "ddp" outside a job.
class SingleProcess : public DistributedStrategy {
 public:
  explicit SingleProcess(std::string mode) : DistributedStrategy(std::move(mode), nullptr) {}
};

/// What the "parallel" section says beyond the mode, for the modes that read it.
struct Settings {
  DataParallelStrategy::Options data_parallel;
  FullyShardedOptions fully_sharded;  // zero3's
};

/// A mode: its name, whether it needs a communicator even alone, and how it is made over one.
struct Mode {
  const char* name;
  bool group_when_alone;  // one process alone still runs it over a one-rank group (one code path)
  std::function<std::unique_ptr<DistributedStrategy>(std::shared_ptr<Communicator>, const Settings&)> make;
};

/// Every mode, in the order error messages list them.
const std::vector<Mode>& modes() {
  using Group = std::shared_ptr<Communicator>;
  static const std::vector<Mode> table = {
      {"none", false, [](Group, const Settings&) { return std::make_unique<SingleProcess>("none"); }},
      {"ddp", false,
       [](Group c, const Settings& s) { return std::make_unique<DataParallelStrategy>(std::move(c), s.data_parallel); }},
      {"zero1", true,
       [](Group c, const Settings& s) { return std::make_unique<ZeroStrategy>(std::move(c), s.data_parallel, false); }},
      {"zero2", true,
       [](Group c, const Settings& s) { return std::make_unique<ZeroStrategy>(std::move(c), s.data_parallel, true); }},
      {"zero3", true,
       [](Group c, const Settings& s) {
         return std::make_unique<Zero3Strategy>(std::move(c), s.fully_sharded);
       }},
  };
  return table;
}

}  // namespace

std::unique_ptr<DistributedStrategy> make_strategy(Params& parallel, std::shared_ptr<Communicator> given, bool cuda,
                                                   Precision precision) {
  std::vector<std::string> names;
  for (const Mode& mode : modes()) names.emplace_back(mode.name);
  const std::string name = parallel.choice("mode", "none", names);
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(1000 * parallel.positive("timeout_seconds", 300)));
  Settings settings;
  settings.data_parallel.bucket_bytes = static_cast<int64_t>(parallel.positive("bucket_mb", 25) * (1 << 20));
  settings.data_parallel.overlap = parallel.boolean("overlap", true);
  settings.fully_sharded =
      fully_sharded_options_from_config(parallel, name, settings.data_parallel.overlap, precision);
  parallel.finish();
  const Mode& mode = *std::find_if(modes().begin(), modes().end(), [&](const Mode& m) { return name == m.name; });

  std::shared_ptr<Communicator> communicator = std::move(given);
  const bool alone = name == "none";
  if (!communicator && !alone && in_multi_process_job()) {
    communicator = connect_job(read_job_environment(), timeout, cuda);
  } else if (!communicator && alone && in_multi_process_job()) {
    const bool torchrun = std::getenv("WORLD_SIZE") != nullptr;  // else Slurm's SLURM_NTASKS says so
    throw ConfigError("config key 'parallel.mode': this process is one rank of a " +
                      std::to_string(read_job_environment().world_size) + "-process job (" +
                      (torchrun ? "WORLD_SIZE" : "SLURM_NTASKS") + "), so it must be \"ddp\", "
                      "\"zero1\", \"zero2\" or \"zero3\", not \"none\"");
  }
  if (communicator && alone) {
    // The mode says what runs: "none" is one process alone, whatever communicator a caller hands the trainer.
    if (communicator->world_size() > 1) {
      throw ConfigError("config key 'parallel.mode': \"none\" trains one process alone, but the trainer was given a "
                        "communicator of " + std::to_string(communicator->world_size()) + " ranks; set it to "
                        "\"ddp\", \"zero1\", \"zero2\" or \"zero3\" to train them together");
    }
    communicator = nullptr;
  }
  if (!communicator && mode.group_when_alone) {
    communicator = make_gloo_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, timeout);
  }
  std::unique_ptr<DistributedStrategy> strategy =
      communicator ? mode.make(std::move(communicator), settings) : std::make_unique<SingleProcess>(name);
  return strategy;
}

}  // namespace basin
