// VaSSO, variance-suppressed SAM (Li and Giannakis, NeurIPS 2023): the
// ascent follows an exponential moving average d of the gradients rather
// than the noisy g. As the authors' code: d = g on the first SAM step, then
// d = (1 - theta) * d + theta * g (updated before use); e = rho * d /
// (||d|| + epsilon), with their epsilon 1e-7.
//
//     {"algorithms": {"vasso": {"theta": 0.9, "rho": 0.05, "epsilon": 1e-7, ...SAM's other keys}}}
//
// d is saved in checkpoints; under data-parallel training the ascent is
// synced ("sync_ascent" stays true) so that d is the same on every rank.
// Cost: one more copy of the parameters.
#include <ATen/ATen.h>

#include "basin/algorithms/sam/moving_average_sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {
class VaSSO : public MovingAverageSAM {
 public:
  explicit VaSSO(Params& params) : MovingAverageSAM(params, SAMDefaults().with_epsilon(1e-7).synced()) {
    theta_ = params.number("theta", 0.9, 0, 1);
    if (!(theta_ > 0)) params.fail("theta", "a number in (0, 1]", theta_);
  }
  std::string name() const override { return "vasso"; }

 protected:
  at::Tensor direction(const at::Tensor& grad, at::Tensor& average) override {
    if (!average.defined()) {
      average = grad.detach().clone();
    } else {
      average.mul_(1 - theta_).add_(grad, theta_);  // updated before use
    }
    return average;
  }

 private:
  double theta_ = 0.9;
};

BASIN_REGISTER_SAM("vasso", VaSSO);

}  // namespace basin
