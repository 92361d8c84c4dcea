// Adaptive SAM (Kwon et al., ICML 2021) by its own name: SAM with
// "adaptive": true, e = rho * T^2 g / ||T g||, T = |w| + eta, and ASAM's
// defaults:
//
//     {"algorithms": {"asam": {"rho": 0.5, "eta": 0.01, "scale": "weights", ...SAM's other keys}}}
//
// "scale" chooses the parameters T scales: "weights", as the ASAM authors'
// code does (names containing "weight", BatchNorm's included; the others,
// biases, have T = 1 and are still perturbed), or "all".
#include <torch/nn/module.h>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {
class ASAM : public SAM {
 public:
  explicit ASAM(Params& params) : SAM(params, SAMDefaults().with_rho(0.5).adaptive()) {
    if (!adaptive()) params.fail("adaptive", "true (asam is adaptive SAM; \"sam\" is the other one)", false);
    weights_only_ = params.choice("scale", "weights", {"weights", "all"}) == "weights";
  }
  std::string name() const override { return "asam"; }

 protected:
  void prepare(StepView& step, const RunFacts& run) override {
    if (!weights_only_) return;
    if (!run.model) throw ConfigError(key("scale") + ": \"weights\" needs a model whose parameter names it can read");
    const auto scaled = parameters_named(*run.model, "weight");
    std::unordered_set<const c10::TensorImpl*> unscaled;
    for (const auto& p : run.model->parameters(true)) {
      if (scaled.count(p.unsafeGetTensorImpl()) == 0) unscaled.insert(step.listed_as(p));
    }
    set_unscaled(std::move(unscaled));
  }

 private:
  bool weights_only_ = true;
};

BASIN_REGISTER_SAM("asam", ASAM);

}  // namespace basin
