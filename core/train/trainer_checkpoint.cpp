// The trainer's side of checkpoints: resuming a run, and the loop's own
// part of a checkpoint (where it stands in its epoch).
#include "basin/core/train/trainer.h"

#include <string>
#include <unordered_map>

#include <ATen/ATen.h>

#include "basin/core/checkpoint.h"
#include "basin/core/optimizer_state.h"
#include "basin/core/parallel/fully_sharded_model.h"
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
  if (state_.parameters_sharded && checkpoint.contains("basin") && checkpoint.at("basin").isGenericDict()) {
    const auto meta = checkpoint.at("basin").toGenericDict();
    const int64_t saved_world = meta.contains("world_size") ? meta.at("world_size").toInt() : 1;
    if (saved_world != state_.world_size) {
      throw ConfigError("the zero3 checkpoint holds the shards of " + std::to_string(saved_world) +
                        " ranks and this run has " + std::to_string(state_.world_size) +
                        ": resume with " + std::to_string(saved_world) + " ranks, or join the shards with "
                        "basin-consolidate and start a new run from that file (\"init_from\")");
    }
  }
  restore_checkpoint(*engine_, checkpoint);
  resumed_ = true;
}

c10::IValue Trainer::shards_state() const {
  // This rank's rows of every parameter, by the model's names, and each
  // parameter's whole shape (basin-consolidate joins the ranks' rows).
  StateDict parameters = new_state_dict();
  StateDict shapes = new_state_dict();
  const auto named = model_->named_parameters(/*recurse=*/true);
  for (const auto& item : named) {
    parameters.insert(item.key(), fully_sharded_->shard_of(item.value()).detach().cpu());
    c10::List<int64_t> shape;
    for (const int64_t d : item.value().sizes()) shape.push_back(d);
    shapes.insert(item.key(), shape);
  }
  // The optimizer numbers the shards (optimizer_state.h): their names in that order.
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& item : named) names[fully_sharded_->shard_of(item.value()).unsafeGetTensorImpl()] = item.key();
  c10::List<std::string> numbering;
  const ParameterNumbering order(*state_.optimizer);
  for (const auto& shard : order.parameters()) {
    numbering.push_back(names.at(shard.unsafeGetTensorImpl()));
  }
  StateDict shards = new_state_dict();
  shards.insert("layout", std::string("rows"));
  shards.insert("numbering", numbering);
  shards.insert("parameters", parameters);
  shards.insert("shapes", shapes);
  return shards;
}

void Trainer::load_shards_state(const c10::IValue& saved) {
  const StateDict shards = saved.toGenericDict();
  const StateDict parameters = shards.at("parameters").toGenericDict();
  at::NoGradGuard no_grad;
  for (const auto& item : model_->named_parameters(/*recurse=*/true)) {
    if (!parameters.contains(item.key())) throw CheckpointError("checkpoint shards lack parameter '" + item.key() + "'");
    at::Tensor shard = fully_sharded_->shard_of(item.value());
    const at::Tensor value = parameters.at(item.key()).toTensor();
    if (value.sizes() != shard.sizes()) {
      throw CheckpointError("checkpoint shard of '" + item.key() + "' does not fit this rank's (another layout)");
    }
    shard.copy_(value);
  }
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
