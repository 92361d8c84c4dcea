// ARWP, adaptive random weight perturbation (Li et al., TMLR 2024,
// "Revisiting random weight perturbation for efficiently improving
// generalization", arXiv 2404.00357): RWP's one pass a step with noise
// that shrinks where the loss has been steep. As the authors' code
// (nblt/mARWP, its ARWP optimizer): each row's scale gamma ||w_row|| is
// divided by
//     sqrt(1 + eta * sum_{j in row} s_j),   s <- beta s + g^2,
// s the running sum of the squared gradients the step's pass gives (at
// w + e, averaged over ranks), per element, summed over each row of a
// matrix (a filter); a vector's elements each keep their own. The first
// step has no s yet: it is RWP's. s is updated before the base steps.
//
//     {"algorithms": {"arwp": {"gamma": 0.01, "eta": 0.1, "beta": 0.99, ...SAM's other keys but rho}}}
//
// eta 0.1 and beta 0.99 are the authors' runs' (their class defaults say 1
// and 0.9). Their cosine rise of gamma over training (train_rwp_cos.py)
// is not taken. s is saved in checkpoints. Under ZeRO-1 and 2 the synced
// gradient is on its owner: owners keep s and draw their parameters'
// noise, and the step gathers w + e to every rank (perturbs_on_owners);
// under zero3 each rank keeps its rows' s and draws its rows. Cost: RWP's
// and one more copy of the parameters (s).
#include <ATen/ATen.h>

#include "basin/algorithms/sam/parameter_buffers.h"
#include "basin/algorithms/sam/rwp.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {

class ARWP : public RWP {
 public:
  explicit ARWP(Params& params) : RWP(params) {
    if (params.has("mix")) params.fail("mix", "absent: arwp is the one-pass form (rwp takes \"mix\")", params.raw("mix"));
    eta_ = params.number("eta", 0.1, 0);
    beta_ = params.number("beta", 0.99, 0, 1);
    rule_state().keep(squares_);
  }
  std::string name() const override { return "arwp"; }

  bool perturbs_on_owners() const override { return true; }

  /// The pass's gradients are final: s takes them, on the ranks that step them.
  void adjust_descent(StepView& /*step*/, std::vector<GroupView>& groups) override {
    for (auto& group : groups) {
      for (std::size_t j = 0; j < group.params.size(); ++j) {
        if (!group.shares[j].stepped_here || j >= group.grads.size() || !group.grads[j].defined()) continue;
        at::Tensor& s = squares_.of(group.params[j]);
        const at::Tensor g = group.grads[j].detach().to(at::kFloat);
        s = s.defined() ? s.mul_(beta_).addcmul_(g, g) : g * g;
      }
    }
  }

 protected:
  at::Tensor row_divisor(const at::Tensor& param, int64_t rows) override {
    const at::Tensor& s = squares_.of(param);
    if (!s.defined() || s.numel() == 0) return at::Tensor();
    return (s.reshape({rows, -1}).sum(1, /*keepdim=*/true) * eta_ + 1).sqrt().cpu();
  }

 private:
  double eta_ = 0.1;
  double beta_ = 0.99;
  ParameterBuffers squares_ = ParameterBuffers("arwp_squared_gradients").held_by_owners();
};

BASIN_REGISTER_SAM("arwp", ARWP);

}  // namespace basin
