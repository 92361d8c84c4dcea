#pragma once

#include "basin/algorithms/sam.h"

namespace basin {

/// ESAM (Du et al., ICLR 2022): SAM at less cost, from two savings.
///   - Stochastic weight perturbation: each step, each parameter tensor
///     takes part in the ascent with probability beta (the others do not
///     require a gradient in the ascent pass, which saves their weight
///     gradients' work, stay at w and leave the norm);
///     e = rho / beta * g_S / (||g_S|| + epsilon) over the chosen tensors S.
///     A step whose draw rests every tensor the loss reaches is a plain
///     one-pass step.
///   - Sharpness-sensitive data selection: after the ascent pass (each
///     sample's loss L(w)), a forward alone at w + e gives L(w + e); the
///     descent pass runs on the round(gamma * n) samples (at least one) whose
///     loss rose most, and the base steps with their mean gradient (no
///     forward alone when that is every sample).
///
///     {"algorithms": {"esam": {"beta": 0.6, "gamma": 0.5, "rho": 0.05, ...SAM's other keys}}}
///
/// beta and gamma are the paper's CIFAR values (its authors' code uses
/// probability beta the same way, and takes the samples strictly above the
/// int(gamma * n)-th largest rise, one fewer; basin takes the top
/// round(gamma * n)). beta 1 and gamma 1 are SAM. The closure must honour
/// `SAMOptimizer::request()`: each sample's loss from the ascent and the
/// forward alone, the descent on the chosen samples (the trainer's closure
/// does; see PassRequest). The tensors chosen come from (seed, step)
/// alone, so a resumed run chooses the same and nothing else is kept. Under
/// data-parallel training each rank chooses its own samples, as the
/// authors' code does (the same count on every rank), and the descent
/// gradients are averaged. Cost: 1 ascent pass (less the resting tensors'
/// weight gradients), 1 forward, 1 descent pass on a gamma share of the
/// batch; 1 parameter copy.
class ESAM : public SAM {
 public:
  explicit ESAM(Params& params);
  std::string name() const override { return "esam"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;

 private:
  double beta_ = 0.6;
  double gamma_ = 0.5;
};

class ESAMOptimizer : public SAMOptimizer {
 public:
  /// `seed` fixes which tensors each step perturbs.
  ESAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double beta, double gamma,
                uint64_t seed);

  /// The tensors step `step` (counting every step from 0) leaves at w.
  std::unordered_set<const c10::TensorImpl*> resting_tensors(int64_t step);

 protected:
  void before_ascent() override;
  void after_ascent() override;
  bool descend(std::vector<GroupView>& groups) override;
  std::vector<Perturbation> perturbation(std::vector<GroupView>& groups) override;
  bool wants_ascent_sample_losses() const override { return gamma_ < 1; }
  at::Tensor descent_samples(const at::Tensor& ascent_losses, const LossClosure& closure) override;

 private:
  double beta_, gamma_;
  uint64_t seed_;
  std::vector<at::Tensor> frozen_;  // resting tensors whose requires_grad the ascent turned off
  bool all_resting_ = false;        // this step's draw rests every tensor: a plain step
};

}  // namespace basin
