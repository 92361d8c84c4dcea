#pragma once

#include "basin/algorithms/sam.h"

namespace basin {

/// Momentum-SAM (Becker et al., 2024): SAM's gain for one pass a step. The
/// perturbation is not measured by an extra pass but read from the base
/// optimizer's momentum v (which accumulates gradients, as PyTorch's does):
/// the step's only pass runs at
///     w - rho * v / (||v|| + epsilon),
/// ahead along the direction the momentum moves w (the authors' code), the
/// norm over the whole model, and the base steps at w with its gradient.
/// v is SGD's (or RMSprop's) momentum buffer, or Adam's and AdamW's first
/// moment exp_avg, whose bias correction is a scalar the normalization
/// removes (the authors' AdamW does the same). An optimizer that keeps no
/// momentum is refused. The first step has no momentum yet: it is plain.
///
///     {"algorithms": {"momentum_sam": {"rho": 0.3, ...SAM's other keys}}}
///
/// rho 0.3 is the authors' default (their CIFAR runs use up to 3). Nothing
/// beyond the base's state is kept. The authors' fused SGD adds weight decay
/// to the gradient at the perturbed point; here the base optimizer adds it at
/// w, as for every SAM variant (a difference of rho * wd at most). Under
/// data-parallel training v is the same on every rank. ZeRO-1 is refused for
/// now: each rank holds its shard's momentum only, while every rank's pass
/// needs the whole perturbation. The paper calls the method MSAM; basin's
/// `msam` is m-sharpness SAM, another method.
class MomentumSAM : public SAM {
 public:
  explicit MomentumSAM(Params& params);
  std::string name() const override { return "momentum_sam"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;
};

class MomentumSAMOptimizer : public SAMOptimizer {
 public:
  /// Throws std::invalid_argument when `base` keeps no momentum.
  MomentumSAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options);

 protected:
  bool perturbs_before_pass() const override { return true; }
  std::vector<Perturbation> perturbation_before_pass(std::vector<GroupView>& groups) override;
};

}  // namespace basin
