#pragma once

#include "basin/algorithms/clean_gradients.h"
#include "basin/algorithms/sam.h"

namespace basin {

/// GSAM (Zhuang et al., ICLR 2022): the base steps with
///     g(w + e) - alpha * g_perp,
/// where g_perp is the part of the clean gradient g(w) orthogonal to g(w + e);
/// it lowers the surrogate gap without raising the perturbed loss. As the
/// authors' code: cos = <g, g_p> / (||g_p|| ||g|| + 1e-12),
/// g_perp = g - cos ||g|| g_p / (||g_p|| + 1e-12).
///
///     {"algorithms": {"gsam": {"alpha": 0.4, "rho": 0.05, ...SAM's other keys}}}
///
/// rho follows the lr as in the paper when a scheduler drives "rho" with the
/// lr's schedule and "minimum": rho_min (README, GSAM). Under data-parallel
/// training both gradients are the synced ones ("sync_ascent" must stay
/// true), so every rank decomposes the same vectors; under ZeRO-1 the three
/// sums are taken over shards (one all-reduce of 3 numbers). Cost: one more
/// copy of the gradients.
class GSAM : public SAM {
 public:
  explicit GSAM(Params& params);
  std::string name() const override { return "gsam"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;
  std::string why_synced_ascent() const override {
    return "decomposes the clean gradient, which must be the same on every rank";
  }

 private:
  double alpha_ = 0.4;
};

class GSAMOptimizer : public SAMOptimizer {
 public:
  GSAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double alpha);

 protected:
  std::vector<Perturbation> perturbation(std::vector<GroupView>& groups) override;
  void adjust_descent_gradients(std::vector<GroupView>& groups) override;

 private:
  double alpha_;
  CleanGradients clean_;
};

}  // namespace basin
