#include "basin/algorithms/sam/sam_rule.h"

#include <torch/optim/optimizer.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/optim/hyperparameters.h"

namespace basin {

double GroupView::get(const std::string& name) const { return get_hyperparameter(*options, name); }

std::vector<Perturbation> SAMRule::perturbation(SAMOptimizer& step, std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> normed;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    normed.insert(normed.end(), groups[k].grads.begin(), groups[k].grads.end());
    result[k].directions = groups[k].grads;
  }
  step.scale_to_rho(result, groups, normed, SAMOptimizer::parameters_of(groups));
  return result;
}

}  // namespace basin
