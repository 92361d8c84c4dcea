// The trainer's side of checkpoints: resuming a run, and the loop's own
// part of a checkpoint (where it stands in its epoch).
#include "basin/core/train/trainer.h"

#include <cstdio>
#include <string>

#include <malloc.h>

#include <ATen/ATen.h>

#include "basin/core/base/console.h"
#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/run_directory.h"
#include "basin/core/checkpoint/sharded_checkpoint.h"
#include "basin/core/model/model.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/train/run_identity.h"
#include "basin/core/train/step_checks.h"

namespace basin {

void Trainer::resume_from(ResumePoint& point, ResumeOptions options) {
  int64_t saved_world = 0;
  {
    const StateDict checkpoint = read_on_every_rank(state_.communicator.get(), state_.device, [&] {
      return checkpoint_for_rank(point.path, point.checkpoint, state_.world_size, strategy_->rows_layout(),
                                 options.reshard || options.allow_config_change);
    });
    point.checkpoint = new_state_dict();  // the rank's own part is all this rank keeps
    saved_world = saved_world_size(checkpoint);
    resume(checkpoint, options);
  }
  // The checkpoint's tensors are copied into the run and freed: hand their pages back to the system, so the
  // heap does not keep them beside what training allocates (measured: 680 MiB on a GPT-2 medium).
  malloc_trim(0);
  if (state_.rank != 0) return;
  const std::string resharded = saved_world == state_.world_size ? "" : ", resharded from " +
                                std::to_string(saved_world) + " ranks to " + std::to_string(state_.world_size);
  console::info("resumed from " + point.path + " at step " + std::to_string(state_.timestamp.step) + " (epoch " +
                std::to_string(state_.timestamp.epoch) + ")" + resharded);
}

std::string Trainer::weights_digest() {
  uint64_t hash = 14695981039346656037ULL;
  auto tensors = whole_parameters();  // gathered under zero3: every rank calls it
  for (const auto& b : model().buffers()) tensors.push_back(b);
  for (const auto& p : tensors) {
    const at::Tensor bytes = p.detach().contiguous().cpu();
    const auto* data = static_cast<const unsigned char*>(bytes.data_ptr());
    for (int64_t i = 0; i < bytes.numel() * static_cast<int64_t>(bytes.element_size()); ++i) {
      hash = (hash ^ data[i]) * 1099511628211ULL;
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

void Trainer::resume(const StateDict& checkpoint, ResumeOptions options) {
  const int64_t saved_world = saved_world_size(checkpoint);
  Json saved;  // the checkpoint's config, when it has one that parses
  if (checkpoint.contains("config") && checkpoint.at("config").isString()) {
    saved = Json::parse(checkpoint.at("config").toStringRef(), nullptr, /*allow_exceptions=*/false);
  }
  if (!options.allow_config_change) {
    if (!checkpoint.contains("config") || !checkpoint.at("config").isString()) {
      throw CheckpointError("checkpoint has no 'config' entry to compare with this run's");
    }
    if (saved.is_discarded()) throw CheckpointError("checkpoint's 'config' entry is not JSON");
    check_same_run(saved, config_, options.reshard ? parallel_keys_reshard_may_change() : std::vector<std::string>{});
    if (saved_world != state_.world_size && !options.reshard) {
      throw ConfigError("the checkpoint was made by " + std::to_string(saved_world) + " ranks and this run has " +
                        std::to_string(state_.world_size) + ": each step would take " + std::to_string(saved_world) +
                        " x batch_size samples before and " + std::to_string(state_.world_size) + " x batch_size now, "
                        "so it would be a different run. Reshard (--reshard) to continue it at this size");
    }
  }
  const bool own_rows = checkpoint.contains("shards");  // one rank's file of a zero3 checkpoint
  StateDict own = checkpoint;
  if (const auto layout = strategy_->rows_layout()) {
    if (own_rows) {
      // The rows it holds are of its "world_size" (a rank's cut of a checkpoint is of this run's).
      const StateDict meta = checkpoint.at("basin").toGenericDict();
      strategy_->check_resume(meta.contains("world_size") && meta.at("world_size").isInt() ? meta.at("world_size").toInt() : 1);
      check_rank_file_rows(checkpoint, *layout);
    } else {
      own = cut_checkpoint(checkpoint, *layout);  // this rank's rows of a whole one
    }
  } else if (own_rows) {
    throw CheckpointError("checkpoint is one rank's file of a checkpoint whose ranks held rows of the parameters; this " +
                          strategy_->mode() + " run holds them whole and resumes from the checkpoint's manifest, whose "
                          "rank files it joins");
  }
  restore_checkpoint(*engine_, own);
  if (epoch_samples_ < 0) {
    // A checkpoint from before the data position was kept: its own steps' samples.
    const Json batch = saved.is_object() ? saved.value("/data/batch_size"_json_pointer, Json()) : Json();
    const int64_t saved_batch = batch.is_number_integer() ? batch.get<int64_t>() : batch_size_;
    epoch_samples_ = state_.timestamp.batch_in_epoch * saved_world * saved_batch;
  }
  // The schedules end where the run now does (another world size or batch size moves that).
  attach_schedulers();
  resumed_ = true;
}

c10::IValue Trainer::loop_state() const {
  StateDict loop = new_state_dict();
  loop.insert("epochs_completed", epochs_completed_);
  loop.insert("epoch_open", epoch_open_);
  loop.insert("epoch_samples", epoch_samples_);
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
  epoch_samples_ = loop.contains("epoch_samples") ? loop.at("epoch_samples").toInt() : -1;  // -1: resume() derives it
  epoch_loss_sum_ = loop.at("epoch_loss_sum").toTensor().to(state_.device, at::kFloat, false, /*copy=*/true);
  epoch_steps_ = loop.at("epoch_steps").toInt();
  state_.skipped_steps = loop.at("skipped_steps").toInt();
  checks_->set_nonfinite_streak(loop.at("nonfinite_streak").toInt());
  state_.test_accuracy = loop.at("test_accuracy").toDouble();
  state_.test_loss = loop.at("test_loss").toDouble();
  // The next batch: inside the open epoch, or the first of the next one.
  state_.timestamp.epoch = epochs_completed_;
  if (!epoch_open_) state_.timestamp.batch_in_epoch = epoch_samples_ = 0;
}

}  // namespace basin
