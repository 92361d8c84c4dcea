#include "basin/callbacks/checkpoint.h"

#include <filesystem>

#include <ATen/ATen.h>

#include "basin/core/base/console.h"
#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/run_directory.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/config/config.h"
#include "basin/core/engine/engine.h"

namespace fs = std::filesystem;

namespace basin {

CheckpointSaver::CheckpointSaver(Params& params) {
  every_epochs_ = params.integer("every_epochs", 1, 0);
  every_steps_ = params.integer("every_steps", 0, 0);
  keep_last_ = params.integer("keep_last", 3, 0);
  dir_ = RunDirectory::checkpoint_dir(params);
}

std::string CheckpointSaver::folder(const std::string& run_dir) const {
  return RunDirectory(run_dir).resolve(dir_);
}

bool CheckpointSaver::on_after_load(const State&, Logger&) {
  unsaved_progress_ = false;
  return false;
}

bool CheckpointSaver::on_batch_end(const State& state, Logger&) {
  unsaved_progress_ = true;
  if (every_steps_ > 0 && state.timestamp.step % every_steps_ == 0) save(state);
  return false;
}

bool CheckpointSaver::on_epoch_end(const State& state, Logger&) {
  unsaved_progress_ = true;
  if (every_epochs_ > 0 && (state.timestamp.epoch + 1) % every_epochs_ == 0) save(state);
  return false;
}

bool CheckpointSaver::on_fit_end(const State& state, Logger&) {
  if (unsaved_progress_) save(state);
  return false;
}

void CheckpointSaver::save(const State& state) {
  if (engine_ == nullptr) throw std::logic_error("the checkpoint callback was not attached to an engine");
  const StateDict checkpoint = capture_checkpoint(*engine_);  // every rank: the capture is collective
  const std::string dir = folder(state.run_dir);
  const std::string path = (fs::path(dir) / checkpoint_file_name(state.timestamp.step)).string();
  const bool rank_files = saves_rank_files(state);
  std::string failure;
  // Every rank learns whether a write failed, so all stop together.
  auto agree = [&](const std::string& elsewhere) {
    if (!state.communicator || state.communicator->world_size() == 1) return;
    std::vector<at::Tensor> failed{at::full({1}, failure.empty() ? 0.0f : 1.0f).to(state.device)};
    state.communicator->all_reduce_max(failed);
    if (failure.empty() && failed.front().item<float>() > 0) failure = elsewhere;
  };
  if (rank_files) {
    // Each rank's own file first; the manifest only once all are written.
    const std::string mine = (fs::path(dir) / rank_file_name(state.timestamp.step, state.rank)).string();
    try {
      write_checkpoint_file(mine, checkpoint);
    } catch (const std::exception& error) {
      failure = error.what();
    }
    agree("another rank could not write its file of checkpoint '" + path + "' (its log says why)");
  }
  if (failure.empty() && state.rank == 0) {
    try {
      write_checkpoint_file(path, rank_files
                                      ? sharded_manifest(checkpoint, state.timestamp.step, state.world_size)
                                      : checkpoint);
      if (keep_last_ > 0) {
        remove_old_checkpoints(dir, keep_last_);
      } else if (rank_files) {
        remove_orphaned_rank_files(dir);  // keeping every checkpoint, but no half-written one
      }
    } catch (const std::exception& error) {
      failure = error.what();
    }
  }
  agree("rank 0 could not write checkpoint '" + path + "' (its log says why)");
  if (!failure.empty()) throw CheckpointError(failure + "; training stops rather than run on unprotected");
  unsaved_progress_ = false;
  last_written_ = path;
  if (state.rank == 0) console::debug("checkpoint: wrote " + path);
}

BASIN_REGISTER(callback_registry(), "checkpoint", CheckpointSaver);

std::shared_ptr<CheckpointSaver> default_checkpoint_saver(const Json& config) {
  const auto callbacks = config.find("callbacks");
  if (callbacks != config.end() && callbacks->is_object() && callbacks->contains("checkpoint")) return nullptr;
  Params defaults(Json::object(), "callbacks.checkpoint");
  return std::make_shared<CheckpointSaver>(defaults);
}

std::string last_checkpoint_written(const Engine& engine) {
  std::string written;
  for (const auto& callback : engine.callbacks()) {
    if (auto saver = std::dynamic_pointer_cast<CheckpointSaver>(callback)) written = saver->last_written();
  }
  return written;
}

}  // namespace basin
