// Flat-LoRA (Li et al., ICML 2025, arXiv 2409.14396): LoRA in a flat region
// of the full weight space at LoRA's cost. SAM on the adapters perturbs only
// their subspace; Flat-LoRA instead trains the adapters on the expected
// loss under random noise on the whole merged weight W' = W + s B A of every
// adapted layer, one pass a step:
//     e_i ~ N(0, (sigma_t ||W'_i|| / sqrt(in))^2 I)  for each row i of W',
//     sigma_t = rho (1 - cos(pi t / T)) / 2,
// rising from 0 to rho over the run's T steps (the authors' code; rho 0.05
// in their runs). The adapters step with the gradient taken at W + e + s B A.
//
//     {"algorithms": {"flat_lora": {"rho": 0.05, ...SAM's other keys}},
//      "adapters": {"lora": {...}}}
//
// The noise is drawn row by row from seeds fixed by (run seed, step, layer,
// row), in the layer's forward and again in its backward (weight_noise.h,
// set on each adapted layer as its LayerPerturbation): it is never stored
// whole and never added to the frozen W, which keeps its bits. The authors
// add it in place to W and subtract it after the step, regenerating it from
// a time-based seed; here resume, data-parallel ranks and zero3's gathered
// units draw what one process draws. A run of unknown length (no max_steps or epochs known)
// keeps sigma at rho. The authors redraw every T steps (T = 1 by default):
// here every step.
#include <cmath>
#include <memory>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"
#include "basin/algorithms/sam/weight_noise.h"
#include "basin/core/config/config_error.h"
#include "basin/core/model/lora.h"

namespace basin {

class FlatLoRA : public SAM {
 public:
  explicit FlatLoRA(Params& params) : SAM(params) {
    if (adaptive()) params.fail("adaptive", "false (flat_lora's noise is scaled by each row of W + s B A)", Json(true));
    if (params.has("perturb")) {
      params.fail("perturb", "absent: flat_lora's noise is on every adapted layer (adapters.lora.targets chooses them)",
                  params.raw("perturb"));
    }
  }
  std::string name() const override { return "flat_lora"; }

  bool ascent_pass() const override { return false; }

  /// The adapters stay at w; the noise is in the adapted layers' forward, armed for this step's pass.
  std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups) override {
    const int64_t index = step.steps() - 1;
    const double rho = groups.empty() ? options_.rho : groups.front().get("rho");
    const double rising = run_steps_ > 0 ? (1.0 - std::cos(std::acos(-1.0) * static_cast<double>(index) /
                                                           static_cast<double>(run_steps_))) / 2.0
                                         : 1.0;
    noise_->step = index;
    noise_->sigma = rho * rising;
    armed_ = true;
    return std::vector<Perturbation>(groups.size());  // scale 0: no directions needed
  }
  /// The noise is in the forward: perturbed where its scale is not 0 (the first step's is: the cosine rises from 0).
  bool perturbs(const std::vector<Perturbation>& /*perturbation*/) const override { return noise_->sigma != 0; }

 protected:
  void prepare(StepView& step, const RunFacts& run) override {
    std::vector<std::pair<std::string, AdaptableLinear*>> layers;
    if (run.model != nullptr) layers = adapted_layers(*run.model);
    if (layers.empty()) {
      throw ConfigError("config key 'adapters.lora': flat_lora trains low-rank adapters under noise on their frozen "
                        "weights, and the model has none; add \"adapters\": {\"lora\": {...}}");
    }
    noise_->run_seed = static_cast<uint64_t>(run.seed);
    run_steps_ = run.run_length;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      layers[i].second->set_perturbation(std::make_shared<WeightNoise>(noise_, static_cast<int64_t>(i)));
    }
    // Noise during this step's pass only: not in a plain step between (interval), not in evaluation.
    step.add_pass_hooks({[this](Pass) { noise_->active = armed_; },
                         [this](Pass) {
                           noise_->active = false;
                           armed_ = false;
                         },
                         nullptr, nullptr});
  }

 private:
  std::shared_ptr<WeightNoiseStep> noise_ = std::make_shared<WeightNoiseStep>();
  bool armed_ = false;
  int64_t run_steps_ = 0;
};

BASIN_REGISTER_SAM("flat_lora", FlatLoRA);

}  // namespace basin
