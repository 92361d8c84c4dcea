// AE-SAM (Jiang et al., ICLR 2023): SAM's second pass only where the loss
// looks sharp. After the ascent pass, with n = ||g||^2 of the batch:
//     mu  = delta * mu  + (1 - delta) * n                (mu first, from 0)
//     var = delta * var + (1 - delta) * (n - mu)^2
//     a SAM step if n >= mu + c_t * sqrt(var), else a plain step with g,
//     c_t = (t/T) * lambda1 + (1 - t/T) * lambda2 over the run's T steps,
// so with lambda1 < lambda2 the share of SAM steps grows through training.
// No code of the authors is public: this is the paper's rule.
//
//     {"algorithms": {"ae_sam": {"delta": 0.9, "lambda1": -1, "lambda2": 1, "rho": 0.05, ...SAM's other keys}}}
//
// mu and var are saved in checkpoints; the share of SAM steps is
// `sam_steps / steps` of the optimizer. T is the run's length (0 where the
// run does not say: c_t stays lambda2). Under data-parallel training the
// ascent is synced ("sync_ascent" stays true): every rank decides alike.
#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {
class AESAM : public SAM {
 public:
  explicit AESAM(Params& params) : SAM(params, SAMDefaults().synced()) {
    delta_ = params.number("delta", 0.9, 0, 1);
    if (!(delta_ < 1)) params.fail("delta", "a number in [0, 1)", delta_);
    lambda1_ = params.number("lambda1", -1.0);
    lambda2_ = params.number("lambda2", 1.0);
    rule_state().keep("mean", mean_);
    rule_state().keep("variance", variance_);
  }
  std::string name() const override { return "ae_sam"; }

  bool descend(StepView& step, std::vector<GroupView>& groups) override {
    const double squared_norm = step.gradient_squares(groups, step.ascent_ranks()).item<double>();
    mean_ = delta_ * mean_ + (1 - delta_) * squared_norm;
    variance_ = delta_ * variance_ + (1 - delta_) * (squared_norm - mean_) * (squared_norm - mean_);
    // This step's index over the run's length; steps() already counts this one.
    const double progress =
        run_steps_ > 0 ? std::min(1.0, static_cast<double>(step.steps() - 1) / static_cast<double>(run_steps_)) : 0.0;
    const double threshold = progress * lambda1_ + (1 - progress) * lambda2_;
    return squared_norm >= mean_ + threshold * std::sqrt(variance_);
  }

 protected:
  void prepare(StepView& /*step*/, const RunFacts& run) override { run_steps_ = run.run_length; }
  std::string why_synced_ascent() const override {
    return "decides from the ascent gradient and steps with it, which must be the same on every rank";
  }

 private:
  double delta_ = 0.9;
  double lambda1_ = -1;
  double lambda2_ = 1;
  int64_t run_steps_ = 0;
  double mean_ = 0;      // of ||g||^2
  double variance_ = 0;  // of ||g||^2
};

BASIN_REGISTER_SAM("ae_sam", AESAM);

}  // namespace basin
