// Fisher SAM (Kim et al., ICML 2022): the perturbation ball is the
// ellipsoid of the Fisher information metric instead of a sphere. Its
// diagonal is approximated from the batch's squared gradient, as the paper
// does: f = 1 + eta * g^2, and
//     e = rho * (g / f) / sqrt(sum g^2 / f)
// (epsilon added to the root). eta = 0 is SAM.
//
//     {"algorithms": {"fisher_sam": {"rho": 0.1, "eta": 1.0, ...SAM's other keys}}}
//
// "eta" here is the Fisher weight, not ASAM's; "adaptive" is refused.
#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {
class FisherSAM : public SAM {
 public:
  explicit FisherSAM(Params& params) : SAM(params, SAMDefaults().with_rho(0.1).with_eta(1.0)) {
    if (adaptive()) params.fail("adaptive", "false (fisher_sam's metric replaces ASAM's)", true);
  }
  std::string name() const override { return "fisher_sam"; }

  std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups) override {
    std::vector<Perturbation> result(groups.size());
    std::vector<at::Tensor> normed;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      const double eta = groups[k].get("eta");
      for (const at::Tensor& grad : groups[k].grads) {
        const at::Tensor fisher = grad.pow(2).mul_(eta).add_(1);  // 1 + eta g^2
        result[k].directions.push_back(grad / fisher);
        normed.push_back(grad / fisher.sqrt());  // its squares sum to g^T f^-1 g
      }
    }
    step.scale_to_rho(result, groups, normed, parameters_of(groups), perturbation_ranks(step));
    return result;
  }
};

BASIN_REGISTER_SAM("fisher_sam", FisherSAM);

}  // namespace basin
