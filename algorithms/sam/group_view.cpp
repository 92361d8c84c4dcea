#include "basin/algorithms/sam/group_view.h"

#include <torch/optim/optimizer.h>

#include "basin/core/optim/hyperparameters.h"

namespace basin {

double GroupView::get(const std::string& name) const { return get_hyperparameter(*options, name); }

std::vector<at::Tensor> parameters_of(const std::vector<GroupView>& groups) {
  std::vector<at::Tensor> params;
  for (const auto& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
  return params;
}

}  // namespace basin
