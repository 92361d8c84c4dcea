#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "basin/algorithms/loss/trajectory_loss.h"

namespace torch::nn { class Module; }

namespace basin {

/// MESA (Du et al., NeurIPS 2022), SAF's memory-efficient form: the
/// reference outputs come from an exponential moving average of the weights,
///     ema = decay * ema + (1 - decay) * w      after every step,
/// run forward on the same microbatch (no gradient, evaluation mode, as the
/// authors' EMA model runs) before the model's own forward.
///
///     {"algorithms": {"mesa": {"lambda": 0.8, "decay": 0.9998, "temperature": 5, "start_epoch": 5}}}
///
/// The defaults are the authors' ImageNet run's. The average starts from the
/// weights at the start of training and covers the buffers too (BatchNorm's
/// running statistics; integer buffers are copied; a tied tensor once). The
/// EMA forward swaps the averaged tensors into the model's parameters and
/// back (no second model, no copy; each module's train/eval flag and
/// autocast's cast cache are left as they were), and runs only in epochs
/// where the term is in the loss, in passes with a backward.
/// Under data-parallel training and ZeRO-1 every rank's weights and buffers
/// are the same after a step, so are the averages. Saved in checkpoints by
/// parameter and buffer name. Cost: one forward without backward a pass;
/// memory one copy of the parameters and buffers.
class MESA : public TrajectoryLoss {
 public:
  explicit MESA(Params& params);
  std::string name() const override { return "mesa"; }
  bool match(Event event, const State& state) const override;
  void apply(Event event, State& state, Logger& logger) override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  double decay() const { return decay_; }
  /// The averaged parameters, then buffers, in the model's order; empty before FIT_START.
  const std::vector<at::Tensor>& averages() const { return averages_; }

 private:
  void start(State& state);
  void reference_forward(State& state);
  void update_averages();
  std::vector<std::pair<std::string, at::Tensor>> named_tensors() const;
  std::vector<at::Tensor> live_tensors() const;
  std::vector<std::string> names() const;

  double decay_ = 0.9998;
  std::shared_ptr<torch::nn::Module> model_;
  std::vector<at::Tensor> averages_;
  StateDict loaded_;  // averages read from a checkpoint before the model was known
  at::Tensor reference_;
};

}  // namespace basin
