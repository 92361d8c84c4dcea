#include "basin/algorithms/sam/moving_average_sam.h"

namespace basin {

std::vector<Perturbation> MovingAverageSAM::perturbation(StepView& step, std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> directions;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    for (std::size_t j = 0; j < groups[k].params.size(); ++j) {
      result[k].directions.push_back(direction(groups[k].grads[j], average_.of(groups[k].params[j])));
      directions.push_back(result[k].directions.back());
    }
  }
  step.scale_to_rho(result, groups, directions, parameters_of(groups), perturbation_ranks(step));
  return result;
}

}  // namespace basin
