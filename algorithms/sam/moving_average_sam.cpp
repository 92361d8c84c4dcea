#include "basin/algorithms/moving_average_sam.h"

namespace basin {

std::vector<SAMOptimizer::Perturbation> MovingAverageSAMOptimizer::perturbation(std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> directions;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    for (std::size_t j = 0; j < groups[k].params.size(); ++j) {
      result[k].directions.push_back(direction(groups[k].grads[j], average_.of(groups[k].params[j])));
      directions.push_back(result[k].directions.back());
    }
  }
  scale_to_rho(result, groups, directions, parameters_of(groups));
  return result;
}

ParameterStates MovingAverageSAMOptimizer::variant_states(const ParameterNumbering& numbering) const {
  ParameterStates states = new_parameter_states();
  average_.save(states, numbering);
  return states;
}

void MovingAverageSAMOptimizer::load_variant_states(const ParameterStates& states,
                                                    const ParameterNumbering& numbering) {
  average_.load(states, numbering);
}

}  // namespace basin
