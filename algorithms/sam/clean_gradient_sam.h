#pragma once

#include "basin/algorithms/sam/clean_gradients.h"
#include "basin/algorithms/sam/sam.h"

namespace basin {

/// The rule of the variants that combine the clean gradient g(w) with the
/// descent gradient g(w + e) (GSAM, WSAM): SAM's e, with every parameter's
/// ascent gradient (perturbed or not) kept for adjust_descent. Both need
/// the ascent synced under data-parallel training, so that every rank
/// combines the same vectors. Cost: one more copy of the gradients.
class CleanGradientSAM : public SAM {
 public:
  explicit CleanGradientSAM(Params& params) : SAM(params, SAMDefaults().synced()) {}

  std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups) override {
    clean_.take(parameters_of(step.groups_with_grads()));
    return SAM::perturbation(step, groups);
  }

 protected:
  /// g(w) of `param` in this step; nullptr when it had none.
  const at::Tensor* clean_gradient(const at::Tensor& param) const { return clean_.of(param); }

 private:
  CleanGradients clean_;
};

}  // namespace basin
