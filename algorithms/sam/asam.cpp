#include "basin/algorithms/asam.h"

#include <torch/nn/module.h>

namespace basin {

namespace {

SAMDefaults asam_defaults() {
  SAMDefaults defaults;
  defaults.rho = 0.5;
  defaults.adaptive = true;
  return defaults;
}

}  // namespace

ASAM::ASAM(Params& params) : SAM(params, asam_defaults()) {
  if (!options_.adaptive) params.fail("adaptive", "true (asam is adaptive SAM; \"sam\" is the other one)", false);
  weights_only_ = params.choice("scale", "weights", {"weights", "all"}) == "weights";
}

std::shared_ptr<SAMOptimizer> ASAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                   const SAMOptions& options, const State& state) {
  auto optimizer = SAM::make_optimizer(std::move(base), options, state);
  if (weights_only_) {
    if (!state.model) throw ConfigError(key("scale") + ": \"weights\" needs a model whose parameter names it can read");
    const auto scaled = parameters_named(*state.model, "weight");
    std::unordered_set<const c10::TensorImpl*> unscaled;
    for (const auto& p : state.model->parameters(true)) {
      if (scaled.count(p.unsafeGetTensorImpl()) == 0) unscaled.insert(p.unsafeGetTensorImpl());
    }
    optimizer->set_unscaled(std::move(unscaled));
  }
  return optimizer;
}

BASIN_REGISTER(algorithm_registry(), "asam", ASAM);

}  // namespace basin
