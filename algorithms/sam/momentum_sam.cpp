
// Momentum-SAM (Becker et al., 2024): SAM's gain for one pass a step. The
// perturbation is not measured by an extra pass but read from the base
// optimizer's momentum v (which accumulates gradients, as PyTorch's does):
// the step's only pass runs at
//     w - rho * v / (||v|| + epsilon),
// ahead along the direction the momentum moves w (the authors' code), the
// norm over the whole model, and the base steps at w with its gradient.
// v is SGD's (or RMSprop's) momentum buffer, or Adam's and AdamW's first
// moment exp_avg, whose bias correction is a scalar the normalization
// removes (the authors' AdamW does the same). An optimizer that keeps no
// momentum is refused. The first step has no momentum yet: it is plain.
//
//     {"algorithms": {"momentum_sam": {"rho": 0.3, ...SAM's other keys}}}
//
// rho 0.3 is the authors' default (their CIFAR runs use up to 3). Nothing
// beyond the base's state is kept. The authors' fused SGD adds weight decay
// to the gradient at the perturbed point; here the base optimizer adds it at
// w, as for every SAM variant (a difference of rho * wd at most). Under
// data-parallel training v is the same on every rank. ZeRO-1 is refused for
// now: each rank holds its shard's momentum only, while every rank's pass
// needs the whole perturbation. The paper calls the method MSAM; basin's
// `msam` is m-sharpness SAM, another method.
#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"
#include "basin/core/optimizer_state.h"

namespace basin {
class MomentumSAM : public SAM {
 public:
  explicit MomentumSAM(Params& params) : SAM(params, SAMDefaults().with_rho(0.3)) {
    if (adaptive()) params.fail("adaptive", "false (momentum_sam perturbs along the momentum)", Json(true));
  }
  std::string name() const override { return "momentum_sam"; }

  bool ascent_pass() const override { return false; }

  std::vector<Perturbation> perturbation(SAMOptimizer& step, std::vector<GroupView>& groups) override {
    std::vector<Perturbation> result(groups.size());
    std::vector<at::Tensor> normed;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      for (const auto& p : groups[k].params) {
        at::Tensor v = first_moment(step.base(), p);
        // A parameter not stepped yet has no momentum: it stays at w.
        if (!v.defined()) v = at::zeros_like(p);
        normed.push_back(v);
        result[k].directions.push_back(std::move(v));  // the live buffer: read before the base steps
      }
    }
    // rho_k / (||v|| + epsilon) per group, then downhill along v: -rho_k * v / ||v||.
    // No momentum anywhere (the first step) leaves every scale 0: w.
    step.scale_to_rho(result, groups, normed, SAMOptimizer::parameters_of(groups));
    for (auto& p : result) p.scale = -p.scale;
    return result;
  }

 protected:
  void prepare(SAMOptimizer& step, const State& /*state*/) override {
    if (step.sharded() != nullptr) {
      throw ConfigError("config key 'parallel.mode': momentum_sam does not run under \"zero1\" yet (each rank keeps "
                        "its own shard's momentum, and every rank's pass needs the whole perturbation); use \"ddp\"");
    }
    const std::string why_not = why_no_first_moment(step.base());
    if (!why_not.empty()) {
      throw ConfigError("config key 'optimizer': momentum_sam perturbs along the optimizer's momentum, but " +
                        why_not + "; use SGD with momentum > 0, Adam or AdamW");
    }
  }
};

BASIN_REGISTER_SAM("momentum_sam", MomentumSAM);

}  // namespace basin
