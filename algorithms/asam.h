#pragma once

#include "basin/algorithms/sam.h"

namespace basin {

/// Adaptive SAM (Kwon et al., ICML 2021) by its own name: SAM with
/// "adaptive": true, e = rho * T^2 g / ||T g||, T = |w| + eta, and ASAM's
/// defaults:
///
///     {"algorithms": {"asam": {"rho": 0.5, "eta": 0.01, "scale": "weights", ...SAM's other keys}}}
///
/// "scale" chooses the parameters T scales: "weights", as the ASAM authors'
/// code does (names containing "weight", BatchNorm's included; the others,
/// biases, have T = 1 and are still perturbed), or "all".
class ASAM : public SAM {
 public:
  explicit ASAM(Params& params);
  std::string name() const override { return "asam"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;

 private:
  bool weights_only_ = true;
};

}  // namespace basin
