#pragma once

#include <ATen/core/Tensor.h>

#include "basin/core/config/config.h"
#include "basin/core/engine/algorithm.h"

namespace basin {

/// Sharpness-aware training for free (Du et al., NeurIPS 2022), the shared
/// part: no second pass, but a term added to each microbatch's loss,
///     lambda * tau^2 * KL(p_ref || p),   p = softmax(z / tau),
/// the mean over the microbatch's samples, where z are the model's outputs
/// and p_ref comes from reference outputs a subclass supplies (SAF: the same
/// samples' outputs some epochs ago; MESA: a moving average of the weights).
/// The term joins the loss in epochs after "start_epoch" (epochs count from
/// 0 and the comparison is strict, as in the authors' code), in every pass
/// of a step that takes several.
///
///     keys: "lambda", "temperature" (5), "start_epoch" (5)
class TrajectoryLoss : public Algorithm {
 public:
  TrajectoryLoss(Params& params, double default_lambda);

  /// lambda * tau^2 * mean_i KL(softmax(reference_i / tau) || softmax(outputs_i / tau)),
  /// in fp32 whatever the outputs' dtype; differentiable in `outputs`. With
  /// `counted` (bool [n]), the other samples contribute 0 to the mean.
  static at::Tensor term(const at::Tensor& outputs, const at::Tensor& reference, double lambda, double temperature,
                         const at::Tensor& counted = {});

  double lambda() const { return lambda_; }
  double temperature() const { return temperature_; }
  int64_t start_epoch() const { return start_epoch_; }
  /// Whether the term is in the loss in this state's epoch.
  bool active(const State& state) const { return state.timestamp.epoch > start_epoch_; }

 protected:
  /// Adds the term for `reference` (outputs of state.microbatch's samples)
  /// to state.loss, divided like the loss by state.microbatch_divisor.
  void add_term(State& state, const at::Tensor& reference, const at::Tensor& counted = {}) const;
  /// Refuses a run whose closure gives no outputs ("loss": "model"): the
  /// term compares them. Subclasses call it on INIT.
  void require_outputs(const State& state) const;
  /// "config key 'algorithms.<name>.<key>'", for messages.
  std::string key(const std::string& name) const { return "config key '" + path_ + "." + name + "'"; }

 private:
  std::string path_;
  double lambda_;
  double temperature_ = 5;
  int64_t start_epoch_ = 5;
};

}  // namespace basin
