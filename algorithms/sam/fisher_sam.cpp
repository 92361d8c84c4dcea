#include "basin/algorithms/fisher_sam.h"

#include <ATen/ATen.h>

namespace basin {

namespace {

SAMDefaults fisher_sam_defaults() {
  SAMDefaults defaults;
  defaults.rho = 0.1;
  defaults.eta = 1.0;
  return defaults;
}

}  // namespace

FisherSAM::FisherSAM(Params& params) : SAM(params, fisher_sam_defaults()) {
  if (options_.adaptive) params.fail("adaptive", "false (fisher_sam's metric replaces ASAM's)", true);
}

std::shared_ptr<SAMOptimizer> FisherSAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                        const SAMOptions& options, const State& /*state*/) {
  return std::make_shared<FisherSAMOptimizer>(std::move(base), options);
}

std::vector<SAMOptimizer::Perturbation> FisherSAMOptimizer::perturbation(std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> normed, params;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const double eta = groups[k].get("eta");
    for (const at::Tensor& grad : groups[k].grads) {
      const at::Tensor fisher = grad.pow(2).mul_(eta).add_(1);  // 1 + eta g^2
      result[k].directions.push_back(grad / fisher);
      normed.push_back(grad / fisher.sqrt());  // its squares sum to g^T f^-1 g
    }
    params.insert(params.end(), groups[k].params.begin(), groups[k].params.end());
  }
  scale_to_rho(result, groups, normed, params);
  return result;
}

BASIN_REGISTER(algorithm_registry(), "fisher_sam", FisherSAM);

}  // namespace basin
