
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
// data-parallel training v is the same on every rank. Under ZeRO-1 each
// rank holds its own shard's momentum: owners perturb their shards (the
// norm over shards) and the others take w + e from them (one all-gather a
// step). The paper calls the method MSAM; basin's
// `msam` is m-sharpness SAM, another method.
#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"
#include "basin/core/optim/optimizer_state.h"

namespace basin {
class MomentumSAM : public SAM {
 public:
  explicit MomentumSAM(Params& params) : SAM(params, SAMDefaults().with_rho(0.3)) {
    if (adaptive()) params.fail("adaptive", "false (momentum_sam perturbs along the momentum)", Json(true));
  }
  std::string name() const override { return "momentum_sam"; }

  bool ascent_pass() const override { return false; }
  bool perturbs_on_owners() const override { return true; }

  std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups) override {
    std::vector<Perturbation> result(groups.size());
    std::vector<at::Tensor> normed;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      for (const auto& p : groups[k].params) {
        at::Tensor v = first_moment(step.stepping_optimizer(), p);
        // A parameter not stepped yet, or another rank's under ZeRO-1, has no momentum here.
        if (!v.defined()) v = at::zeros_like(p);
        normed.push_back(v);
        result[k].directions.push_back(std::move(v));  // the live buffer: read before the base steps
      }
    }
    // rho_k / (||v|| + epsilon) per group, then downhill along v: -rho_k * v / ||v||.
    // No momentum anywhere (the first step) leaves every scale 0: w.
    step.scale_to_rho(result, groups, normed, parameters_of(groups), perturbation_ranks(step));
    for (auto& p : result) p.scale = -p.scale;
    return result;
  }

 protected:
  void prepare(StepView& step, const RunFacts& /*run*/) override {
    const std::string why_not = why_no_first_moment(step.stepping_optimizer());
    if (!why_not.empty()) {
      throw ConfigError("config key 'optimizer': momentum_sam perturbs along the optimizer's momentum, but " +
                        why_not + "; use SGD with momentum > 0, Adam or AdamW");
    }
  }
};

BASIN_REGISTER_SAM("momentum_sam", MomentumSAM);

}  // namespace basin
