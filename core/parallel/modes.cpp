// Every parallel mode, registered: a new mode is its folder (its strategy,
// the reader of its keys, its checkpoint layout: rows_layout and
// checkpoint_parts) plus its line in modes()'s table (its keys, and which of
// them a resume or a resharded resume may change); make_strategy reads the
// config's "parallel" section, but for "activation_checkpointing" (the
// trainer's), each mode its own keys.
#include "basin/core/parallel/distributed_strategy.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "basin/core/communication/communicator.h"
#include "basin/core/communication/rendezvous.h"
#include "basin/core/parallel/ddp/data_parallel_strategy.h"
#include "basin/core/parallel/hsdp/hsdp_strategy.h"
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

using Group = std::shared_ptr<Communicator>;
/// How a mode is made once its keys are read: over a group of ranks.
using MakeStrategy = std::function<std::unique_ptr<DistributedStrategy>(Group)>;

/// A mode: its name; whether one process alone still runs it over a
/// one-rank group (one code path); the keys of the "parallel" section it
/// reads beyond "mode" and "timeout_seconds"; of those, the ones a resume may
/// change (they change no number), and the ones a resharded resume may
/// change besides (its layout: numbers differ only as another world size's
/// do, by the order of each sum); how it reads them, before any
/// rank connects (so a bad config fails first), into how it is made; and
/// the error for one of its own keys given under another mode (none: the
/// section's "not known").
struct Mode {
  const char* name;
  bool group_when_alone;
  std::vector<std::string> keys;
  std::vector<std::string> resume_may_change;
  std::vector<std::string> reshard_may_change;
  std::function<MakeStrategy(Params& parallel, Precision precision)> configure;
  std::function<void(const Params& parallel, const std::string& key, const std::string& mode)> refuse_elsewhere;
};

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Every mode, in the order error messages list them.
const std::vector<Mode>& modes() {
  using Options = DataParallelStrategy::Options;
  const std::vector<std::string>& sync_keys = DataParallelStrategy::option_keys();
  static const std::vector<Mode> table = {
      {"none", false, sync_keys, {}, sync_keys,
       [](Params& parallel, Precision) -> MakeStrategy {
         DataParallelStrategy::options_from_config(parallel);  // accepted, as a ddp config run alone
         return [](Group) { return std::make_unique<SingleProcess>("none"); };
       },
       nullptr},
      {"ddp", false, sync_keys, {}, sync_keys,
       [](Params& parallel, Precision) -> MakeStrategy {
         const Options options = DataParallelStrategy::options_from_config(parallel);
         return [options](Group c) { return std::make_unique<DataParallelStrategy>(std::move(c), options); };
       },
       nullptr},
      {"zero1", true, sync_keys, {}, sync_keys,
       [](Params& parallel, Precision) -> MakeStrategy {
         const Options options = DataParallelStrategy::options_from_config(parallel);
         return [options](Group c) { return std::make_unique<ZeroStrategy>(std::move(c), options, false); };
       },
       nullptr},
      {"zero2", true, sync_keys, {}, sync_keys,
       [](Params& parallel, Precision) -> MakeStrategy {
         const Options options = DataParallelStrategy::options_from_config(parallel);
         return [options](Group c) { return std::make_unique<ZeroStrategy>(std::move(c), options, true); };
       },
       nullptr},
      {"zero3", true, joined(sync_keys, fully_sharded_keys()), fully_sharded_keys_changing_no_number(), sync_keys,
       [](Params& parallel, Precision precision) -> MakeStrategy {
         const bool overlap = DataParallelStrategy::options_from_config(parallel).overlap;
         const FullyShardedOptions options = fully_sharded_options_from_config(parallel, overlap, precision);
         return [options](Group c) { return std::make_unique<Zero3Strategy>(std::move(c), options); };
       },
       refuse_fully_sharded_key},
      {"hsdp", true, joined(joined(sync_keys, fully_sharded_keys()), HsdpStrategy::option_keys()),
       fully_sharded_keys_changing_no_number(), joined(sync_keys, HsdpStrategy::option_keys()),
       [](Params& parallel, Precision precision) -> MakeStrategy {
         const bool overlap = DataParallelStrategy::options_from_config(parallel).overlap;
         const FullyShardedOptions options = fully_sharded_options_from_config(parallel, overlap, precision);
         const int64_t group = HsdpStrategy::shard_group_size_from_config(parallel);
         return [options, group](Group c) { return std::make_unique<HsdpStrategy>(c, group, options); };
       },
       HsdpStrategy::refuse_key},
  };
  return table;
}

/// The modes that train ranks together, for messages: "ddp", "zero1", ... or "zero3".
std::string group_modes_text() {
  std::vector<std::string> names;
  for (const Mode& mode : modes()) {
    if (std::string(mode.name) != "none") names.push_back("\"" + std::string(mode.name) + "\"");
  }
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return text;
}

/// Refuses a key of `parallel` that another mode reads and `chosen` does not, as that mode words it.
void refuse_other_modes_keys(const Params& parallel, const Mode& chosen) {
  for (const Mode& other : modes()) {
    if (&other == &chosen || !other.refuse_elsewhere) continue;
    for (const std::string& key : other.keys) {
      const bool shared = std::find(chosen.keys.begin(), chosen.keys.end(), key) != chosen.keys.end();
      if (!shared && parallel.has(key)) other.refuse_elsewhere(parallel, key, chosen.name);
    }
  }
}

/// "parallel.<key>" for each of the modes' keys `of` lists, each once.
std::vector<std::string> parallel_paths(const std::vector<std::string>& common,
                                        const std::function<const std::vector<std::string>&(const Mode&)>& of) {
  std::vector<std::string> paths;
  auto add = [&paths](const std::string& key) {
    const std::string path = "parallel." + key;
    if (std::find(paths.begin(), paths.end(), path) == paths.end()) paths.push_back(path);
  };
  for (const std::string& key : common) add(key);
  for (const Mode& mode : modes()) {
    for (const std::string& key : of(mode)) add(key);
  }
  return paths;
}

}  // namespace

std::vector<std::string> parallel_keys_resume_may_change() {
  return parallel_paths({"timeout_seconds"}, [](const Mode& m) -> const std::vector<std::string>& { return m.resume_may_change; });
}

std::vector<std::string> parallel_keys_reshard_may_change() {
  return parallel_paths({"mode"}, [](const Mode& m) -> const std::vector<std::string>& { return m.reshard_may_change; });
}

std::unique_ptr<DistributedStrategy> make_strategy(Params& parallel, std::shared_ptr<Communicator> given, bool cuda,
                                                   Precision precision) {
  std::vector<std::string> names;
  for (const Mode& mode : modes()) names.emplace_back(mode.name);
  const std::string name = parallel.choice("mode", "none", names);
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(1000 * parallel.positive("timeout_seconds", 300)));
  const Mode& mode = *std::find_if(modes().begin(), modes().end(), [&](const Mode& m) { return name == m.name; });
  refuse_other_modes_keys(parallel, mode);
  const MakeStrategy make = mode.configure(parallel, precision);
  parallel.finish();

  std::shared_ptr<Communicator> communicator = std::move(given);
  const bool alone = name == "none";
  if (!communicator && !alone && in_multi_process_job()) {
    communicator = connect_job(read_job_environment(), timeout, cuda);
  } else if (!communicator && alone && in_multi_process_job()) {
    const bool torchrun = std::getenv("WORLD_SIZE") != nullptr;  // else Slurm's SLURM_NTASKS says so
    throw ConfigError("config key 'parallel.mode': this process is one rank of a " +
                      std::to_string(read_job_environment().world_size) + "-process job (" +
                      (torchrun ? "WORLD_SIZE" : "SLURM_NTASKS") + "), so it must be " + group_modes_text() +
                      ", not \"none\"");
  }
  if (communicator && alone) {
    // The mode says what runs: "none" is one process alone, whatever communicator a caller hands the trainer.
    if (communicator->world_size() > 1) {
      throw ConfigError("config key 'parallel.mode': \"none\" trains one process alone, but the trainer was given a "
                        "communicator of " + std::to_string(communicator->world_size()) + " ranks; set it to " +
                        group_modes_text() + " to train them together");
    }
    communicator = nullptr;
  }
  if (!communicator && mode.group_when_alone) {
    communicator = make_gloo_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, timeout);
  }
  return communicator ? make(std::move(communicator)) : std::make_unique<SingleProcess>(name);
}

}  // namespace basin
