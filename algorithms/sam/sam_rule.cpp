#include "basin/algorithms/sam/sam_rule.h"

#include "basin/algorithms/sam/step_view.h"

namespace basin {

// SAM's own rule, the default every variant overrides: e = rho * g / (||g|| + epsilon).
std::vector<Perturbation> SAMRule::perturbation(StepView& step, std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> normed;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    normed.insert(normed.end(), groups[k].grads.begin(), groups[k].grads.end());
    result[k].directions = groups[k].grads;
  }
  step.scale_to_rho(result, groups, normed, parameters_of(groups), perturbation_ranks(step));
  return result;
}

Ranks SAMRule::perturbation_ranks(const StepView& step) const {
  return perturbs_on_owners() ? Ranks::kJob : step.ascent_ranks();
}

}  // namespace basin
