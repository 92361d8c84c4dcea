// The trainer's side of checkpoints: resuming a run, and the loop's own
// part of a checkpoint (where it stands in its epoch).
#include "basin/core/train/trainer.h"

#include <string>

#include <ATen/ATen.h>

#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/train/model.h"
#include "basin/core/train/run_identity.h"
#include "basin/core/train/step_checks.h"

namespace basin {

void Trainer::resume(const StateDict& checkpoint, bool allow_config_change) {
  if (!allow_config_change) {
    if (!checkpoint.contains("config") || !checkpoint.at("config").isString()) {
      throw CheckpointError("checkpoint has no 'config' entry to compare with this run's");
    }
    Json saved;
    try {
      saved = Json::parse(checkpoint.at("config").toStringRef());
    } catch (const std::exception&) {
      throw CheckpointError("checkpoint's 'config' entry is not JSON");
    }
    check_same_run(saved, config_);
    if (checkpoint.contains("basin") && checkpoint.at("basin").isGenericDict()) {
      const auto meta = checkpoint.at("basin").toGenericDict();
      const int64_t saved_world = meta.contains("world_size") ? meta.at("world_size").toInt() : 1;
      if (saved_world != state_.world_size) {
        throw ConfigError("the checkpoint was made by " + std::to_string(saved_world) + " ranks and this run has " +
                          std::to_string(state_.world_size) + ": each rank's batches would differ, so it would be "
                          "a different run. Pass --allow-config-change to resume anyway (weights and optimizer "
                          "state load at any world size)");
      }
    }
  }
  if (checkpoint.contains("basin") && checkpoint.at("basin").isGenericDict()) {
    const auto meta = checkpoint.at("basin").toGenericDict();
    strategy_->check_resume(meta.contains("world_size") && meta.at("world_size").isInt() ? meta.at("world_size").toInt()
                                                                                          : 1);
  }
  restore_checkpoint(*engine_, checkpoint);
  resumed_ = true;
}

c10::IValue Trainer::loop_state() const {
  StateDict loop = new_state_dict();
  loop.insert("epochs_completed", epochs_completed_);
  loop.insert("epoch_open", epoch_open_);
  loop.insert("epoch_loss_sum", epoch_loss_sum_.defined() ? epoch_loss_sum_.detach().cpu() : at::zeros({}));
  loop.insert("epoch_steps", epoch_steps_);
  loop.insert("skipped_steps", state_.skipped_steps);
  loop.insert("nonfinite_streak", checks_->nonfinite_streak());
  loop.insert("test_accuracy", state_.test_accuracy);
  loop.insert("test_loss", state_.test_loss);
  return loop;
}

void Trainer::load_loop_state(const c10::IValue& saved) {
  const StateDict loop = saved.toGenericDict();
  epochs_completed_ = loop.at("epochs_completed").toInt();
  epoch_open_ = loop.at("epoch_open").toBool();
  epoch_loss_sum_ = loop.at("epoch_loss_sum").toTensor().to(state_.device, at::kFloat, false, /*copy=*/true);
  epoch_steps_ = loop.at("epoch_steps").toInt();
  state_.skipped_steps = loop.at("skipped_steps").toInt();
  checks_->set_nonfinite_streak(loop.at("nonfinite_streak").toInt());
  state_.test_accuracy = loop.at("test_accuracy").toDouble();
  state_.test_loss = loop.at("test_loss").toDouble();
  // The next batch: inside the open epoch, or the first of the next one.
  state_.timestamp.epoch = epochs_completed_;
  if (!epoch_open_) state_.timestamp.batch_in_epoch = 0;
}

}  // namespace basin
