#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "basin/core/base/state_dict.h"
#include "basin/core/config/config.h"
#include "basin/core/data/dataset.h"
#include "basin/core/engine/engine.h"
#include "basin/core/engine/pass_hooks.h"
#include "basin/core/engine/state.h"
#include "basin/core/model/lora.h"
#include "basin/core/train/evaluation.h"
#include "basin/core/train/loss.h"

namespace basin {

class Callback;
class Communicator;
class DistributedStrategy;
class LoggerDestination;
class Model;
struct ResumePoint;
class Scheduler;
class StepChecks;
class TrainingClosure;

/// What a finished fit reports (basin-train writes it as summary.json).
struct FitSummary {
  int64_t steps = 0;
  int64_t epochs = 0;
  double final_train_loss = 0;  // mean training loss over the last epoch's steps
  double test_accuracy = 0;
  double test_loss = 0;
  double test_perplexity = std::nan("");  // of a token cross-entropy; absent from the JSON otherwise
  int64_t skipped_steps = 0;
  double wall_seconds = 0;
  /// A signal (SIGINT/SIGTERM) stopped the run after a step; the checkpoint
  /// callback, if configured, wrote where to resume.
  bool interrupted = false;
  Json to_json() const;
  /// The line basin-train ends with: the test accuracy (or loss and
  /// perplexity), the steps and the time, and where the run was written.
  std::string result_line(const std::string& run_dir) const;
};

/// What a resume may change besides the keys that change no number of the run.
struct ResumeOptions {
  /// Any config key and the world size (a different run from there on).
  bool allow_config_change = false;
  /// The world size and the parallel mode's layout ("parallel.mode",
  /// "bucket_mb", "overlap"): the checkpoint's weights, optimizer and rule
  /// state and data position are cut anew for this run's ranks.
  bool reshard = false;
};

/// Builds a whole training run from a config and runs the loop of `Event`.
///
/// Construction does everything that can fail on bad input — parses and
/// validates every section, loads the data, builds model, optimizer,
/// schedulers, algorithms and callbacks, then runs INIT and AFTER_SHARDING
/// and attaches the schedulers — so a bad config fails before any training
/// and before anything is written. `fit()` then trains.
class Trainer {
 public:
  /// `communicator`: the job's ranks, for tests that run ranks as threads;
  /// when null and "parallel.mode" is ddp, zero1, zero2 or zero3, the trainer joins the job
  /// its environment describes (RANK, WORLD_SIZE, MASTER_ADDR, ...).
  explicit Trainer(const Json& config, std::vector<std::shared_ptr<Callback>> callbacks = {},
                   std::vector<std::shared_ptr<LoggerDestination>> loggers = {},
                   std::shared_ptr<Communicator> communicator = nullptr);
  ~Trainer();

  /// Continues the run a checkpoint recorded (core/checkpoint/checkpoint.h lists what
  /// it holds), so that fit() goes on as if never stopped. The config must be
  /// the checkpoint's except where a difference cannot change the run
  /// (check_same_run), and the world size the same, unless `options` allow.
  /// Every rank calls it with the same checkpoint, or under zero3 with its
  /// own file of one (checkpoint_for_rank). A whole checkpoint resumes under
  /// zero3 too: each rank takes its rows of it.
  ///
  /// At another world size the run continues at the same sample of the
  /// epoch's order, each step taking world size x batch size samples from
  /// there; the step schedulers' horizon becomes the steps the run has
  /// taken plus those it will take now.
  void resume(const StateDict& checkpoint, ResumeOptions options = {});
  /// Resumes from `point` (run_directory.h) on every rank: each reads its
  /// part (a zero3 manifest's own rank file when the job has the saved
  /// size, else the files joined and cut to its rows; a rank that cannot
  /// read its part stops every rank at once), then `resume`; the file's
  /// tensors, copied into the run, go back to the system, and rank 0 says
  /// where the run resumed. `point.checkpoint` is emptied.
  void resume_from(ResumePoint& point, ResumeOptions options = {});

  /// Trains from where the run stands (the start, or a resumed checkpoint)
  /// to max_epochs/max_steps, a callback's stop or an interrupt.
  FitSummary fit();
  /// Accuracy and mean loss on the test split (fires EVAL_START/EVAL_END).
  EvalResult evaluate();

  /// The model's parameters whole, cloned, in its order: under zero3 its
  /// own hold no bytes between units (collective then); else copies of them.
  std::vector<at::Tensor> whole_parameters();
  /// FNV-1a over the bytes of every parameter (whole) and buffer, in hex:
  /// equal digests mean bit-equal models (collective under zero3).
  std::string weights_digest();
  /// Rank 0 writes the trained model into `dir` (Model::export_trained);
  /// collective under zero3, which gathers every parameter for it.
  void export_model(const std::string& dir);
  /// What the parallel mode does ("parallel.mode").
  DistributedStrategy& strategy() { return *strategy_; }

  /// The config as given, with the model keys init_from's config.json
  /// gives where it leaves them out (core/model/pretrained_keys.h): what the
  /// run directory keeps, so that what reads it builds the same model.
  const Json& config() const { return config_; }
  State& state() { return state_; }
  Engine& engine() { return *engine_; }
  Model& model() { return *model_; }
  const DataSplits& data() const { return data_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t microbatches() const { return microbatches_; }

 private:
  void build(const Json& config, std::vector<std::shared_ptr<Callback>> callbacks,
             std::vector<std::shared_ptr<LoggerDestination>> loggers, std::shared_ptr<Communicator> communicator);
  /// The "wrap for distribution" point of the loop: the strategy makes the
  /// replicas equal and wraps the optimizer (and under zero3 the model).
  void wrap_for_distribution(Params& optimizer_config);
  void train_batch(const Batch& batch);
  /// Evaluates on the test split and logs the epoch's record.
  void evaluate_and_log(FitSummary& summary);
  /// Evaluation, the epoch's record and per-epoch schedulers, then EPOCH_END.
  void end_epoch(FitSummary& summary);
  /// The trainer's part of a checkpoint: where it stands in the epoch.
  c10::IValue loop_state() const;
  void load_loop_state(const c10::IValue& saved);
  /// One pass of the closure, its loss kept for the step checks.
  at::Tensor run_pass();
  /// One optimizer step: the optimizer's own passes when it runs the closure
  /// itself (SAM), else one pass, the checks and the base step here.
  at::Tensor optimizer_step();
  double current_lr() const;
  /// Whether the step that ends at `step` writes a metrics record (`last_in_epoch`: the epoch's last step).
  bool logged(int64_t step, bool last_in_epoch) const;
  /// Whether a step's world size x batch size samples remain in the epoch after `consumed` of them.
  bool batch_remains(int64_t consumed) const;
  /// Steps the open epoch still has at this world size (0 between epochs).
  int64_t steps_left_in_epoch() const;
  /// The run's length in steps, as fit() will stop, from where it stands.
  int64_t run_steps() const;
  /// The epochs it will have begun by then.
  int64_t run_epochs() const;
  /// Gives the schedulers the run's length in their units (a resumed run's world size may have changed it).
  void attach_schedulers();
  /// Whether the loss is a cross-entropy without smoothing over token targets (perplexity and accuracy are logged).
  bool token_cross_entropy() const;
  /// Ranks agree on stopping: a callback's request or a signal on any rank.
  void agree_on_stop();

  State state_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<Model> model_;
  std::optional<LoraOptions> lora_;  // "adapters.lora": only the adapters train
  std::string base_weights_;         // init_from's path, which an exported adapter names as its base
  DataSplits data_;
  int64_t batch_size_ = 0;
  int64_t microbatches_ = 1;
  int64_t eval_batch_size_ = 0;
  bool shuffle_ = true;
  std::unique_ptr<DistributedStrategy> strategy_;
  Loss loss_;
  std::unique_ptr<StepChecks> checks_;
  std::unique_ptr<TrainingClosure> closure_;
  at::Tensor epoch_loss_sum_;
  /// Seconds this process spent in the epoch's steps (evaluation aside); not
  /// in checkpoints, so a resumed epoch counts from the resume.
  double epoch_train_seconds_ = 0;
  int64_t epoch_steps_ = 0;
  /// Next-token accuracy of this step's first pass (at w, where the loss is); NaN without token targets.
  double step_accuracy_ = 0;
  bool accuracy_wanted_ = false;  // this step is logged and its first pass has not run
  Json config_;                  // as given, with the model keys init_from's config.json gives: checkpoints keep it, resume compares it
  int64_t epochs_completed_ = 0;
  bool epoch_open_ = false;      // EPOCH_START ran, the epoch's end has not
  int64_t epoch_samples_ = 0;    // of this epoch's order, taken by all ranks (the data position)
  bool resumed_ = false;
  bool interrupted_ = false;
};

}  // namespace basin
