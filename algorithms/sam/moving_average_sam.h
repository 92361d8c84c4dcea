#pragma once

#include "basin/algorithms/parameter_buffers.h"
#include "basin/algorithms/sam_optimizer.h"

namespace basin {

/// A SAM step that climbs along a direction built from a moving average of
/// the ascent gradients, kept per parameter and saved in checkpoints
/// (Friendly SAM, VaSSO). e = rho * d / (||d|| + epsilon) over every
/// perturbed parameter; subclasses say what d is. The average takes every
/// SAM step's finite ascent gradient, a step whose descent then overflows
/// included (the gradient it took was sound); the plain steps between SAM
/// steps (`interval` > 1) do not feed it, as their papers have no such steps.
class MovingAverageSAMOptimizer : public SAMOptimizer {
 public:
  using SAMOptimizer::SAMOptimizer;

  ParameterStates variant_states(const ParameterNumbering& numbering) const override;
  void load_variant_states(const ParameterStates& states, const ParameterNumbering& numbering) override;

 protected:
  /// d for one parameter from its gradient, updating `average` (undefined
  /// on the first SAM step: the subclass starts it).
  virtual at::Tensor direction(const at::Tensor& grad, at::Tensor& average) = 0;

  std::vector<Perturbation> perturbation(std::vector<GroupView>& groups) override;

 private:
  ParameterBuffers average_{"gradient_average"};
};

}  // namespace basin
