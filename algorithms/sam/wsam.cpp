// Weighted SAM (Yue et al., KDD 2023): sharpness as a regularizer of weight
// gamma, L(w) + gamma / (1 - gamma) * (L(w + e) - L(w)). With
// a = gamma / (1 - gamma) and s = g(w + e) - g(w), as the authors' code:
//   "decouple": true   the base optimizer steps with the clean g(w) (its
//                      momentum, moments and weight decay see g alone), then
//                      w -= lr * a * s, a plain step of the group's lr
//   "decouple": false  the base optimizer steps with g(w) + a * s
//
//     {"algorithms": {"wsam": {"gamma": 0.9, "decouple": true, "rho": 0.05, ...SAM's other keys}}}
//
// Under data-parallel training g(w) must be the synced one ("sync_ascent"
// stays true), or replicas would drift. Under ZeRO-1 the decoupled step
// moves this rank's shard and the owners broadcast again (one more
// all-gather per step). Cost: one more copy of the gradients.
#include <ATen/ATen.h>

#include "basin/algorithms/sam/clean_gradient_sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {
class WSAM : public CleanGradientSAM {
 public:
  explicit WSAM(Params& params) : CleanGradientSAM(params) {
    const double gamma = params.number("gamma", 0.9, 0);
    if (!(gamma < 1)) params.fail("gamma", "a number in [0, 1)", gamma);
    weight_ = gamma / (1 - gamma);
    decouple_ = params.boolean("decouple", true);
  }
  std::string name() const override { return "wsam"; }

  void adjust_descent(StepView& step, std::vector<GroupView>& groups) override {
    at::NoGradGuard no_grad;
    std::vector<StepView::StepAfterBase> sharpness_steps;
    for (auto& g : groups) {
      for (std::size_t j = 0; j < g.params.size(); ++j) {
        const at::Tensor* clean = clean_gradient(g.params[j]);
        if (clean == nullptr || !g.shares[j].stepped_here) continue;
        at::Tensor& grad = g.grads[j];
        if (decouple_) {
          sharpness_steps.push_back({g.params[j], grad - *clean, g.get("lr") * weight_});
          grad.copy_(*clean);
        } else {
          grad.mul_(weight_).add_(*clean, 1 - weight_);  // g + a (g_p - g)
        }
      }
    }
    if (decouple_) step.step_after_base(std::move(sharpness_steps));
  }

 protected:
  std::string why_synced_ascent() const override {
    return "combines the clean gradient into the descent gradient, which must be the same on every rank";
  }

 private:
  double weight_ = 9;  // gamma / (1 - gamma)
  bool decouple_ = true;
};

BASIN_REGISTER_SAM("wsam", WSAM);

}  // namespace basin
