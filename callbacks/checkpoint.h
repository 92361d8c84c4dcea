#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "basin/core/config/json.h"
#include "basin/core/engine/callback.h"

namespace basin {

class Engine;

/// Writes checkpoints of the whole run (everything core/checkpoint/checkpoint.h lists),
/// from which `basin-train --resume` continues as if never stopped:
///
///     {"callbacks": {"checkpoint": {"every_epochs": 1, "every_steps": 0, "keep_last": 3,
///                                   "dir": "checkpoints"}}}
///
/// A checkpoint is written after every `every_epochs`-th epoch, after every
/// `every_steps`-th step (0: never), and when the fit ends — finished,
/// stopped, or interrupted by SIGINT/SIGTERM — unless one was just written
/// at that point. Files go to `dir` inside the run directory (an absolute
/// `dir` as it is) as step-<step>.pt; the newest `keep_last` are kept (0:
/// all). Every rank takes part (the optimizer's shards are gathered) and
/// rank 0 writes; under zero3 each rank writes its own file and rank 0 the
/// manifest, last (checkpoint_file.h). A checkpoint that cannot be written (full disk, no
/// permission) stops training with an error naming the file on every rank:
/// training on unprotected would lose more than it gains. Earlier
/// checkpoints stay intact.
class CheckpointSaver : public Callback {
 public:
  explicit CheckpointSaver(Params& params);

  std::string name() const override { return "checkpoint"; }
  void attach(Engine& engine) override { engine_ = &engine; }
  bool on_after_load(const State& state, Logger& logger) override;
  bool on_batch_end(const State& state, Logger& logger) override;
  bool on_epoch_end(const State& state, Logger& logger) override;
  bool on_fit_end(const State& state, Logger& logger) override;

  /// The folder checkpoints go to for a run directory (empty: the current one).
  std::string folder(const std::string& run_dir) const;
  /// Path of the last checkpoint written; empty before the first.
  const std::string& last_written() const { return last_written_; }

 private:
  void save(const State& state);

  int64_t every_epochs_ = 1;
  int64_t every_steps_ = 0;
  int64_t keep_last_ = 3;
  std::string dir_ = "checkpoints";
  Engine* engine_ = nullptr;
  bool unsaved_progress_ = false;  // the run moved since the last checkpoint
  std::string last_written_;
};

/// The checkpoint callback every basin-train run gets, with its defaults, so
/// that any run can be resumed; null when `config` names its own under
/// "callbacks" (the trainer builds that one).
std::shared_ptr<CheckpointSaver> default_checkpoint_saver(const Json& config);

/// The last checkpoint `engine`'s checkpoint callback wrote; empty when it
/// has none or wrote none.
std::string last_checkpoint_written(const Engine& engine);

}  // namespace basin
