// The training loop: fit() runs the epochs and their batches, each batch one
// optimizer step between the events of core/engine/event.h.
#include "basin/core/train/trainer.h"

#include <chrono>
#include <cmath>
#include <mutex>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "basin/core/base/interrupt.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/data/data_pipeline.h"
#include "basin/core/model/model.h"
#include "basin/core/optim/loss_scaler.h"
#include "basin/core/optim/scheduler.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/sharding/sharded_parameters.h"
#include "basin/core/train/generator_lock.h"
#include "basin/core/train/step_checks.h"
#include "basin/core/train/training_closure.h"

namespace basin {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

Json FitSummary::to_json() const {
  Json json{{"steps", steps},
            {"epochs", epochs},
            {"final_train_loss", final_train_loss},
            {"test_accuracy", test_accuracy},
            {"test_loss", test_loss},
            {"skipped_steps", skipped_steps},
            {"wall_seconds", wall_seconds},
            {"interrupted", interrupted}};
  if (!std::isnan(test_perplexity)) json["test_perplexity"] = test_perplexity;
  return json;
}

std::string FitSummary::result_line(const std::string& run_dir) const {
  std::ostringstream line;
  // A model whose forward needs the targets gives no logits to measure an accuracy with: its loss says it.
  if (!std::isnan(test_perplexity)) {
    line << "test loss " << test_loss << " (perplexity " << test_perplexity << "), next-token accuracy "
         << test_accuracy;
  } else if (std::isnan(test_accuracy)) {
    line << "test loss " << test_loss;
  } else {
    line << "test accuracy " << test_accuracy;
  }
  line << " after " << steps << " steps (" << epochs << " epochs, " << wall_seconds << " s); run directory "
       << run_dir;
  return line.str();
}

void Trainer::agree_on_stop() {
  // A callback or a signal that stops one rank stops every rank, after the
  // same step: a rank that left alone would leave the others waiting in
  // their next collective, and their checkpoints must be of one step.
  interrupted_ = interrupt_requested();
  if (!state_.communicator || state_.communicator->world_size() == 1) return;
  std::vector<at::Tensor> flags{at::tensor({state_.stop_requested ? 1.0f : 0.0f, interrupted_ ? 1.0f : 0.0f})
                                    .to(state_.device)};
  state_.communicator->all_reduce_max(flags);
  const at::Tensor agreed = flags.front().cpu();
  state_.stop_requested = agreed[0].item<float>() > 0;
  interrupted_ = agreed[1].item<float>() > 0;
}

bool Trainer::logged(int64_t step, bool last_in_epoch) const {
  return step % state_.log_every == 0 || step == state_.max_steps || last_in_epoch;
}

bool Trainer::batch_remains(int64_t consumed) const {
  return consumed + batch_size_ * state_.world_size <= data_.train.size();
}

bool Trainer::token_cross_entropy() const {
  return loss_.gives_perplexity() && data_.train.size() > 0 && data_.train.per_token();
}

double Trainer::current_lr() const {
  const auto& groups = state_.optimizer->param_groups();
  return groups.empty() ? 0.0 : groups.front().options().get_lr();
}

at::Tensor Trainer::run_pass() {
  // The step's first pass (at w) measures the accuracy a logged step reports.
  closure_->measure_accuracy(accuracy_wanted_);
  at::Tensor loss = (*closure_)();
  checks_->record_pass_loss(closure_->pass_loss());
  if (accuracy_wanted_) step_accuracy_ = closure_->pass_accuracy();
  accuracy_wanted_ = false;
  return loss;
}

at::Tensor Trainer::optimizer_step() {
  if (dynamic_cast<PassAwareOptimizer*>(state_.optimizer.get()) != nullptr) {
    return state_.optimizer->step([this] { return run_pass(); });
  }
  at::Tensor loss;
  {
    at::AutoGradMode enable_grad(true);
    loss = run_pass();
  }
  const PassHooks hooks = checks_->pass_hooks(state_, strategy_->shards());
  if (hooks.gradients_finite(Pass::kPlain)) {
    hooks.before_base_step();
    state_.optimizer->step();
  } else {
    state_.optimizer->zero_grad();
  }
  return loss;
}

void Trainer::train_batch(const Batch& batch) {
  const auto start = Clock::now();
  state_.batch = {batch.inputs.to(state_.device, /*non_blocking=*/true), batch.targets.to(state_.device, true), batch.ids};
  engine_->run(Event::BATCH_START);
  engine_->run(Event::BEFORE_STEP);
  const double lr = current_lr();
  step_accuracy_ = std::nan("");
  const int64_t consumed = epoch_samples_ + batch_size_ * state_.world_size;  // once this step is done
  accuracy_wanted_ = token_cross_entropy() && logged(state_.timestamp.step + 1, !batch_remains(consumed));
  checks_->start_step();
  at::Tensor loss = optimizer_step();
  // Under data parallelism buffers (BatchNorm statistics) follow rank 0's
  // after every step, so the next step, evaluation and saved outputs do not
  // depend on the rank.
  strategy_->after_step();
  state_.step_loss = loss.defined() ? loss.detach() : at::full({}, NAN);
  state_.pass = Pass::kPlain;
  bool skipped = false;
  if (state_.scaler) {
    // One scale update per step, from every pass's verdict; a skipped step
    // still counts as a step, so schedules keep to the step count.
    skipped = state_.scaler->step_found_inf();
    state_.scaler->update();
  } else {
    // Without a scaler a non-finite loss skips the step (weights untouched).
    skipped = checks_->nonfinite_in_step();
  }
  if (skipped) ++state_.skipped_steps;
  checks_->end_step(state_.timestamp.step + 1);
  engine_->run(Event::AFTER_STEP);
  for (auto& scheduler : state_.schedulers) {
    if (scheduler->interval() == Scheduler::Interval::kStep) scheduler->step(*state_.optimizer);
  }
  auto& ts = state_.timestamp;
  ++ts.step;
  ++ts.batch_in_epoch;
  ts.samples += batch.size();
  epoch_samples_ = consumed;
  if (!skipped) {  // the epoch's mean loss is over the steps that trained
    epoch_loss_sum_ += state_.step_loss;
    ++epoch_steps_;
  }
  const double step_seconds = seconds_since(start);
  epoch_train_seconds_ += step_seconds;
  if (logged(ts.step, !batch_remains(epoch_samples_))) {
    Json record{{"step", ts.step},
                {"epoch", ts.epoch},
                {"loss", state_.step_loss.item<double>()},
                {"lr", lr},
                {"step_seconds", step_seconds},
                {"samples_per_second", static_cast<double>(batch.size()) / step_seconds},
                {"skipped_steps", state_.skipped_steps}};
    if (token_cross_entropy()) {
      record["perplexity"] = std::exp(state_.step_loss.item<double>());
      record["accuracy"] = step_accuracy_;
      record["tokens_per_second"] = static_cast<double>(batch.targets.numel()) / step_seconds;
    }
    engine_->logger().emit(record);
  }
  engine_->run(Event::BATCH_END);
}

EvalResult Trainer::evaluate() {
  return basin::evaluate(*model_, data_.test, loss_, eval_batch_size_, state_, *engine_);
}

void Trainer::evaluate_and_log(FitSummary& summary) {
  const auto& ts = state_.timestamp;
  const EvalResult eval = evaluate();
  summary.final_train_loss = epoch_steps_ > 0 ? epoch_loss_sum_.item<double>() / static_cast<double>(epoch_steps_) : 0.0;
  Json record{{"epoch", ts.epoch},
              {"step", ts.step},
              {"train_loss", summary.final_train_loss},
              {"test_accuracy", eval.accuracy},
              {"test_loss", eval.loss},
              {"train_seconds", epoch_train_seconds_}};
  if (token_cross_entropy()) {
    record["train_perplexity"] = std::exp(summary.final_train_loss);
    record["test_perplexity"] = eval.perplexity;
  }
  summary.test_perplexity = eval.perplexity;
  engine_->logger().emit(record);
}

void Trainer::end_epoch(FitSummary& summary) {
  evaluate_and_log(summary);
  // Per-epoch schedulers step before EPOCH_END, so a checkpoint written
  // there holds the closed epoch whole.
  for (auto& scheduler : state_.schedulers) {
    if (scheduler->interval() == Scheduler::Interval::kEpoch) scheduler->step(*state_.optimizer);
  }
  epoch_open_ = false;
  ++epochs_completed_;
  engine_->run(Event::EPOCH_END);
  agree_on_stop();
}

FitSummary Trainer::fit() {
  const auto start = Clock::now();
  FitSummary summary;
  auto& ts = state_.timestamp;
  // Random draws during training (dropout, ...) depend only on the seed, not
  // on what ran in this process since construction; each rank draws its own,
  // reproducibly, in a process of its own (ranks as threads share the one
  // generator while they train). A resumed run continues the generators it saved.
  if (!resumed_) {
    std::lock_guard<std::mutex> seeding(global_generator_mutex());  // not inside another trainer's building
    at::manual_seed(static_cast<uint64_t>(state_.seed) + 0x5EED + static_cast<uint64_t>(state_.rank));
  }
  model_->train();
  engine_->run(Event::FIT_START);
  interrupted_ = false;
  bool done = state_.stop_requested;
  while (ts.epoch < state_.max_epochs && !done) {
    if (!epoch_open_) {  // a resumed run may start inside an epoch
      ts.batch_in_epoch = 0;
      epoch_samples_ = 0;
      epoch_loss_sum_ = at::zeros({}, at::TensorOptions(at::kFloat).device(state_.device));
      epoch_train_seconds_ = 0;
      epoch_steps_ = 0;
      epoch_open_ = true;
      engine_->run(Event::EPOCH_START);
    }
    // Every rank draws the same epoch order; each step takes the next
    // world size x batch size samples of it, one contiguous slice per rank
    // (a disjoint, deterministic shard). The order depends on (seed, epoch)
    // alone, so a resumed epoch continues at the sample it stopped at, at
    // any world size.
    const EpochOrder order(data_.train.size(), static_cast<uint64_t>(state_.seed), ts.epoch, shuffle_,
                           /*computed=*/data_.train.windowed());
    while (batch_remains(epoch_samples_)) {
      if (state_.max_steps > 0 && ts.step >= state_.max_steps) {
        done = true;
        break;
      }
      train_batch(data_.train.gather(order.take(epoch_samples_ + state_.rank * batch_size_, batch_size_)));
      agree_on_stop();
      if (interrupted_) break;
      if ((state_.max_steps > 0 && ts.step >= state_.max_steps) || state_.stop_requested) {
        done = true;
        break;
      }
    }
    summary.epochs = ts.epoch + 1;
    if (interrupted_) break;  // the epoch stays open: the resumed run finishes it
    if (batch_remains(epoch_samples_)) {
      // Stopped inside the epoch (max_steps, a callback): evaluate, but keep
      // the epoch open, so a run extended from here continues it.
      evaluate_and_log(summary);
      break;
    }
    end_epoch(summary);
    ++ts.epoch;
    done = done || state_.stop_requested || interrupted_;
  }
  engine_->run(Event::FIT_END);
  summary.steps = ts.step;
  summary.test_accuracy = state_.test_accuracy;
  summary.test_loss = state_.test_loss;
  summary.skipped_steps = state_.skipped_steps;
  summary.interrupted = interrupted_;
  summary.epochs = std::max(summary.epochs, epochs_completed_);
  summary.wall_seconds = seconds_since(start);
  return summary;
}

}  // namespace basin
