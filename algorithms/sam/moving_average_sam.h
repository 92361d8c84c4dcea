#pragma once

#include "basin/algorithms/sam/rule_state.h"
#include "basin/algorithms/sam/sam.h"

namespace basin {

/// The rule of the variants that climb along a direction built from a
/// moving average of the ascent gradients, kept per parameter and saved in
/// checkpoints (Friendly SAM, VaSSO): e = rho * d / (||d|| + epsilon) over
/// every perturbed parameter; subclasses say what d is. The average takes
/// every SAM step's finite ascent gradient, a step whose descent then
/// overflows included (the gradient it took was sound); the plain steps
/// between SAM steps (`interval` > 1) do not feed it, as their papers have
/// no such steps. Both need a synced ascent under data-parallel training:
/// a checkpoint saves the average once for every rank.
class MovingAverageSAM : public SAM {
 public:
  MovingAverageSAM(Params& params, const SAMDefaults& defaults) : SAM(params, defaults) { rule_state().keep(average_); }

  std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups) override;

 protected:
  /// d for one parameter from its gradient, updating `average` (undefined
  /// on the first SAM step: the subclass starts it).
  virtual at::Tensor direction(const at::Tensor& grad, at::Tensor& average) = 0;
  std::string why_synced_ascent() const override {
    return "keeps a moving average of the ascent gradients, which a checkpoint saves once for every rank";
  }

 private:
  ParameterBuffers average_{"gradient_average"};
};

}  // namespace basin
