#include "basin/algorithms/sam/sam_rule.h"

#include <torch/optim/optimizer.h>

#include "basin/algorithms/sam/step_view.h"
#include "basin/core/optim/hyperparameters.h"

namespace basin {

double GroupView::get(const std::string& name) const { return get_hyperparameter(*options, name); }

Ranks SAMRule::perturbation_ranks(const StepView& step) const {
  return perturbs_on_owners() ? Ranks::kJob : step.ascent_ranks();
}

}  // namespace basin
