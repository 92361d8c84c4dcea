#include "basin/core/train/training_closure.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/engine/engine.h"
#include "basin/core/model/model.h"
#include "basin/core/optim/loss_scaler.h"
#include "basin/core/train/autocast.h"

namespace basin {

TrainingClosure::TrainingClosure(State& state, Engine& engine, Model& model, Loss loss, int64_t microbatches,
                                 Sync sync)
    : state_(state), engine_(engine), model_(model), loss_(std::move(loss)), microbatches_(microbatches),
      sync_(std::move(sync)) {}

at::Tensor TrainingClosure::operator()() {
  const PassRequest& request = state_.request;
  if (request.backward) state_.optimizer->zero_grad();  // a forward alone leaves the gradients as they are
  const int64_t parts = request.parts;
  if (parts < 1 || request.part < 0 || request.part >= parts || state_.batch.size() % (parts * microbatches_) != 0) {
    throw ConfigError("batch part " + std::to_string(request.part) + " of " + std::to_string(parts) + ": the " +
                      std::to_string(state_.batch.size()) + "-sample batch must split into " + std::to_string(parts) +
                      " parts of " + std::to_string(microbatches_) + " equal microbatches (data.batch_size)");
  }
  // The part, then the selected samples of it, then their microbatches.
  const Batch picked = requested_samples(state_.batch, request);
  const int64_t samples = picked.size();
  if (samples == 0) throw std::logic_error("the optimizer asked for a pass on no sample");
  // A request may hold fewer samples than there are microbatches.
  const int64_t count = std::min(microbatches_, samples);
  const auto inputs = picked.inputs.chunk(count);
  const auto targets = picked.targets.chunk(count);
  const auto ids = picked.ids.defined() ? picked.ids.chunk(count) : std::vector<at::Tensor>(inputs.size());
  state_.microbatch_count = static_cast<int64_t>(inputs.size());
  at::Tensor total = at::zeros({}, at::TensorOptions(at::kFloat).device(state_.device));
  std::vector<at::Tensor> sample_losses;
  // Token targets: the pass's loss is the mean over its counted tokens, on
  // every rank whose gradients it averages, however they fall.
  const bool tokens = !loss_.from_model() && Loss::per_token(picked.targets);
  // This rank's counted tokens; the pass reports its mean over them (at least 1).
  const auto counted = static_cast<double>(tokens ? loss_.count(picked.targets) : 0);
  const double counted_here = std::max(counted, 1.0);
  const double tokens_per_rank = tokens ? counted_tokens_per_rank(counted) : 0.0;
  const bool measured = tokens && measure_accuracy_;
  at::Tensor correct = measured ? at::zeros({}, at::TensorOptions(at::kLong).device(state_.device)) : at::Tensor();
  // What the pass reports of token targets: this rank's mean over its counted tokens (what it backpropagates is
  // its share of the mean over every rank's).
  at::Tensor token_sum = tokens ? at::zeros({}, at::TensorOptions(at::kFloat).device(state_.device)) : at::Tensor();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    state_.microbatch = {inputs[i], targets[i], ids[i]};
    state_.microbatch_index = static_cast<int64_t>(i);
    // Each microbatch carries its share of the pass's mean loss (k equal microbatches: 1/k each);
    // of token targets, the share of its counted tokens.
    state_.microbatch_divisor =
        tokens ? tokens_per_rank / static_cast<double>(std::max<int64_t>(loss_.count(targets[i]), 1))
               : static_cast<double>(samples) / static_cast<double>(inputs[i].size(0));
    {
      AutocastGuard autocast(state_.precision, state_.device.type());
      at::AutoGradMode grad_mode(request.backward);
      engine_.run(Event::BEFORE_FORWARD);
      // A model that computes its own loss gives no outputs: its loss stands for them.
      at::Tensor own_loss;
      if (loss_.from_model()) {
        own_loss = model_loss();
        state_.outputs = at::Tensor();
      } else {
        state_.outputs = model_.run(state_.microbatch.inputs);
      }
      engine_.run(Event::AFTER_FORWARD);
      engine_.run(Event::BEFORE_LOSS);
      if (own_loss.defined()) {
        state_.loss = own_loss / state_.microbatch_divisor;
      } else if (tokens) {
        const at::Tensor outputs = state_.outputs.to(at::kFloat);  // the loss is fp32
        // Each sequence's sum, when asked for, gives the microbatch's too: one cross-entropy over the logits.
        const at::Tensor sequences =
            request.per_sample_losses ? loss_.sequence_sums(outputs, state_.microbatch.targets) : at::Tensor();
        if (sequences.defined()) sample_losses.push_back(sequences.detach());
        const at::Tensor sum = sequences.defined() ? sequences.sum() : loss_.sum(outputs, state_.microbatch.targets);
        token_sum += sum.detach();
        state_.loss = sum / tokens_per_rank;
        if (measured) correct += loss_.correct(state_.outputs.detach(), state_.microbatch.targets);
      } else if (request.per_sample_losses) {
        const at::Tensor outputs = state_.outputs.to(at::kFloat);  // the loss is fp32
        const at::Tensor each = loss_.per_sample(outputs, state_.microbatch.targets);
        sample_losses.push_back(each.detach());
        state_.loss = each.mean() / state_.microbatch_divisor;
      } else {
        state_.loss = loss_.mean(state_.outputs.to(at::kFloat), state_.microbatch.targets) / state_.microbatch_divisor;
      }
      engine_.run(Event::AFTER_LOSS);
    }
    total += state_.loss.detach();
    if (!request.backward) continue;
    engine_.run(Event::BEFORE_BACKWARD);
    // Microbatches accumulate locally; ranks sync once, as the pass asks, in the last one's backward
    // (under ZeRO-3 in each one's, onto the shards).
    const bool syncs = (i + 1 == inputs.size() || sync_.every_microbatch) && request.sync != GradientSync::kNone;
    if (syncs && sync_.prepare) sync_.prepare(request.sync);
    try {
      const at::Tensor weighted = request.loss_weight == 1 ? state_.loss : state_.loss * request.loss_weight;
      (state_.scaler ? state_.scaler->scale(weighted) : weighted).backward();
      if (syncs && sync_.finish) sync_.finish(request.sync);
    } catch (...) {
      if (syncs && sync_.abandon) sync_.abandon();
      throw;
    }
    engine_.run(Event::AFTER_BACKWARD);
  }
  if (tokens) total = token_sum / counted_here;
  pass_accuracy_ = measured ? correct.item<double>() / counted_here : std::nan("");
  pass_loss_ = total;
  if (!request.per_sample_losses) return total;
  // Of token targets, each sequence's share of the pass's token mean, times the sequences: their mean is that
  // mean (the step's loss), and ESAM ranks sequences by what they add to the loss the step descends on.
  if (tokens) return at::cat(sample_losses) * (static_cast<double>(samples) / counted_here);
  return at::cat(sample_losses);
}

double TrainingClosure::counted_tokens_per_rank(double here) const {
  const auto& ranks = state_.communicator;
  // Rank-local gradients (kNone), and a forward alone, take this rank's tokens alone.
  if (state_.request.sync == GradientSync::kNone || !state_.request.backward || !ranks || ranks->world_size() == 1) {
    return std::max(here, 1.0);
  }
  // Averaged gradients: each rank's loss is its tokens' sum over the step's mean tokens per rank, so the
  // average over ranks is the sum over all the step's tokens over their count.
  std::vector<at::Tensor> counted{at::full({}, here, at::TensorOptions(at::kDouble).device(state_.device))};
  ranks->all_reduce_sum(counted);
  return std::max(counted.front().item<double>(), 1.0) / static_cast<double>(ranks->world_size());
}

at::Tensor TrainingClosure::model_loss() {
  if (state_.request.per_sample_losses) {
    throw ConfigError("config key 'loss': \"model\" gives one loss per batch, and an algorithm asked for each "
                      "sample's (ESAM's data selection, gamma < 1); use the config's loss, or gamma 1");
  }
  return model_.run_loss(state_.microbatch.inputs, state_.microbatch.targets).to(at::kFloat);  // the loss is fp32
}

}  // namespace basin
