#pragma once

#include "basin/algorithms/sam.h"

namespace basin {

/// Fisher SAM (Kim et al., ICML 2022): the perturbation ball is the
/// ellipsoid of the Fisher information metric instead of a sphere. Its
/// diagonal is approximated from the batch's squared gradient, as the paper
/// does: f = 1 + eta * g^2, and
///     e = rho * (g / f) / sqrt(sum g^2 / f)
/// (epsilon added to the root). eta = 0 is SAM.
///
///     {"algorithms": {"fisher_sam": {"rho": 0.1, "eta": 1.0, ...SAM's other keys}}}
///
/// "eta" here is the Fisher weight, not ASAM's; "adaptive" is refused.
class FisherSAM : public SAM {
 public:
  explicit FisherSAM(Params& params);
  std::string name() const override { return "fisher_sam"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;
};

class FisherSAMOptimizer : public SAMOptimizer {
 public:
  using SAMOptimizer::SAMOptimizer;

 protected:
  std::vector<Perturbation> perturbation(std::vector<GroupView>& groups) override;
};

}  // namespace basin
