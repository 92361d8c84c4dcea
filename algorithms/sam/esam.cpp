// ESAM (Du et al., ICLR 2022): SAM at less cost, from two savings.
//   - Stochastic weight perturbation: each step, each parameter tensor
//     takes part in the ascent with probability beta (the others do not
//     require a gradient in the ascent pass, which saves their weight
//     gradients' work, stay at w and leave the norm);
//     e = rho / beta * g_S / (||g_S|| + epsilon) over the chosen tensors S.
//     A step whose draw rests every tensor the loss reaches is a plain
//     one-pass step.
//   - Sharpness-sensitive data selection: after the ascent pass (each
//     sample's loss L(w)), a forward alone at w + e gives L(w + e); the
//     descent pass runs on the round(gamma * n) samples (at least one) whose
//     loss rose most, and the base steps with their mean gradient (no
//     forward alone when that is every sample). Of token targets a
//     sequence's loss is its share of the token mean (see PassRequest).
//
//     {"algorithms": {"esam": {"beta": 0.6, "gamma": 0.5, "rho": 0.05, ...SAM's other keys}}}
//
// beta and gamma are the paper's CIFAR values (its authors' code uses
// probability beta the same way, and takes the samples strictly above the
// int(gamma * n)-th largest rise, one fewer; basin takes the top
// round(gamma * n)). beta 1 and gamma 1 are SAM. The closure must honour
// the step's `request()`: each sample's loss from the ascent and the
// forward alone, the descent on the chosen samples (the trainer's closure
// does; see PassRequest). The tensors chosen come from (seed, step)
// alone, so a resumed run chooses the same and nothing else is kept. Under
// data-parallel training each rank chooses its own samples, as the
// authors' code does (the same count on every rank), and the descent
// gradients are averaged. Cost: 1 ascent pass (less the resting tensors'
// weight gradients), 1 forward, 1 descent pass on a gamma share of the
// batch; 1 parameter copy.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/pass_plan.h"
#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"
#include "basin/core/base/random.h"

namespace basin {

class ESAM : public SAM, public PassPlan {
 public:
  explicit ESAM(Params& params) : SAM(params) {
    beta_ = params.number("beta", 0.6, 0, 1);
    if (beta_ <= 0) params.fail("beta", "a probability in (0, 1]", Json(beta_));
    gamma_ = params.number("gamma", 0.5, 0, 1);
    if (gamma_ <= 0) params.fail("gamma", "a share of the batch in (0, 1]", Json(gamma_));
  }
  std::string name() const override { return "esam"; }

  AscentPlan ascent(StepView& step, int64_t index) override {
    AscentPlan plan;
    plan.per_sample_losses = gamma_ < 1;
    if (beta_ >= 1) return plan;
    // One draw per tensor, in group order, from a stream fixed by (seed, step).
    Rng rng(seed_ ^ 0xE5A3ULL, static_cast<uint64_t>(index));
    for (const auto& g : step.parameter_groups(/*perturbed_only=*/true)) {
      for (const auto& p : g.params) {
        if (rng.uniform() >= beta_) plan.resting.insert(p.unsafeGetTensorImpl());
      }
    }
    return plan;
  }

  std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups) override {
    // SAM's e over the chosen tensors (the resting ones are not in `groups`), scaled by 1 / beta.
    auto result = SAM::perturbation(step, groups);
    for (auto& p : result) p.scale /= beta_;
    return result;
  }

  at::Tensor descent_samples(StepView& step, const at::Tensor& ascent_losses,
                             const std::function<at::Tensor()>& closure) override {
    if (gamma_ >= 1) return {};
    const int64_t n = ascent_losses.numel();
    const int64_t keep = std::clamp<int64_t>(std::llround(gamma_ * static_cast<double>(n)), 1, n);
    if (keep == n) return {};  // every sample: no forward needed to rank them
    const at::Tensor after = step.forward_at_current_weights(closure);
    if (after.sizes() != ascent_losses.sizes()) {
      throw std::logic_error("ESAM: the forward at w + e returned " + std::to_string(after.numel()) +
                             " sample losses, the ascent " + std::to_string(ascent_losses.numel()));
    }
    const at::Tensor rise = (after.to(at::kCPU, at::kDouble) - ascent_losses.to(at::kCPU, at::kDouble));
    // The samples whose loss rose most, in batch order.
    return std::get<0>(std::get<1>(at::topk(rise, keep)).sort());
  }

 protected:
  void prepare(StepView& /*step*/, const RunFacts& run) override {
    seed_ = static_cast<uint64_t>(run.seed);
    if (gamma_ < 1 && !run.outputs_given) {
      throw ConfigError(key("gamma") + ": below 1 the descent takes the samples whose loss rose most, and \"loss\": "
                        "\"model\" gives one loss per batch; use gamma 1 or the config's loss");
    }
  }

 private:
  double beta_ = 0.6;
  double gamma_ = 0.5;
  uint64_t seed_ = 0;  // fixes which tensors each step perturbs
};

BASIN_REGISTER_SAM("esam", ESAM);

}  // namespace basin
