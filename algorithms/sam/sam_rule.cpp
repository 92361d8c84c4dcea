#include "basin/algorithms/sam/sam_rule.h"

#include <torch/optim/optimizer.h>

#include "basin/core/optim/hyperparameters.h"

namespace basin {

double GroupView::get(const std::string& name) const { return get_hyperparameter(*options, name); }

}  // namespace basin
