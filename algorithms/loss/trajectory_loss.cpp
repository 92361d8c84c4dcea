#include "basin/algorithms/loss/trajectory_loss.h"

#include <ATen/ATen.h>

namespace basin {

TrajectoryLoss::TrajectoryLoss(Params& params, double default_lambda) : path_(params.path()) {
  lambda_ = params.number("lambda", default_lambda, 0);
  temperature_ = params.positive("temperature", 5);
  start_epoch_ = params.integer("start_epoch", 5, -1);
}

at::Tensor TrajectoryLoss::term(const at::Tensor& outputs, const at::Tensor& reference, double lambda,
                                double temperature, const at::Tensor& counted) {
  const at::Tensor log_p = at::log_softmax(outputs.to(at::kFloat) / temperature, 1);
  const at::Tensor log_ref = at::log_softmax(reference.to(outputs.device(), at::kFloat) / temperature, 1);
  // KL(p_ref || p) = sum_c p_ref (log p_ref - log p), per sample.
  at::Tensor kl = (log_ref.exp() * (log_ref - log_p)).sum(1);
  if (counted.defined()) kl = kl * counted.to(kl.device(), at::kFloat);
  return kl.mean() * (lambda * temperature * temperature);
}

void TrajectoryLoss::add_term(State& state, const at::Tensor& reference, const at::Tensor& counted) const {
  state.loss = state.loss + term(state.outputs, reference, lambda_, temperature_, counted) / state.microbatch_divisor;
}

void TrajectoryLoss::require_outputs(const State& state) const {
  if (state.outputs_per_token) {
    throw ConfigError("config key '" + path_ + "': compares each sample's class distribution with an earlier one, and "
                      "the data's targets are token sequences (a language model); it takes class targets");
  }
  if (state.outputs_given) return;
  throw ConfigError("config key '" + path_ + "': compares the model's outputs (logits), and \"loss\": \"model\" "
                    "gives none (the model returns its loss); use the config's loss");
}

}  // namespace basin
