// Friendly SAM (Li et al., CVPR 2024): the ascent leaves out the full
// gradient's component, estimated by an exponential moving average m of
// past raw gradients. As the authors' code:
//   first SAM step   m = g, e from g (plain SAM)
//   later            d = g - sigma * m (m from the steps before), then
//                    m = lambda * m + (1 - lambda) * g (the raw g, not d);
//                    e = rho * d / (||d|| + epsilon)
//
//     {"algorithms": {"friendly_sam": {"sigma": 1.0, "lambda": 0.9, "rho": 0.05, ...SAM's other keys}}}
//
// m is saved in checkpoints; under data-parallel training the ascent is
// synced ("sync_ascent" stays true), so m is the same on every rank. Cost:
// one more copy of the parameters.
#include <ATen/ATen.h>

#include "basin/algorithms/sam/moving_average_sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {
class FriendlySAM : public MovingAverageSAM {
 public:
  explicit FriendlySAM(Params& params) : MovingAverageSAM(params, SAMDefaults().synced()) {
    sigma_ = params.number("sigma", 1.0, 0);
    lambda_ = params.number("lambda", 0.9, 0, 1);
  }
  std::string name() const override { return "friendly_sam"; }

 protected:
  at::Tensor direction(const at::Tensor& grad, at::Tensor& average) override {
    if (!average.defined()) {  // the first SAM step is SAM's
      average = grad.detach().clone();
      return grad;
    }
    at::Tensor direction = at::sub(grad, average, sigma_);  // the average of the steps before
    average.mul_(lambda_).add_(grad, 1 - lambda_);          // of raw gradients
    return direction;
  }

 private:
  double sigma_ = 1.0;
  double lambda_ = 0.9;
};

BASIN_REGISTER_SAM("friendly_sam", FriendlySAM);

}  // namespace basin
