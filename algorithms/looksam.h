#pragma once

#include "basin/algorithms/clean_gradients.h"
#include "basin/algorithms/parameter_buffers.h"
#include "basin/algorithms/sam.h"

namespace basin {

/// LookSAM (Liu et al., CVPR 2022): SAM's second pass only every k-th SAM
/// step. A refresh step is SAM's, and keeps g_v, the part of the perturbed
/// gradient g_s orthogonal to the clean g: g_v = g_s - (<g_s, g> / ||g||^2) g.
/// The steps between take one pass and step with
///     g + alpha * ||g|| / ||g_v|| * g_v,
/// norms over the whole model, as in the paper.
///
///     {"algorithms": {"looksam": {"k": 5, "alpha": 0.7, "rho": 0.05, ...SAM's other keys}}}
///
/// g_v and its norm are saved in checkpoints; a refresh whose descent
/// overflows (the step is skipped) is retried at the next step. Under
/// data-parallel training the ascent is synced ("sync_ascent" stays true): a
/// reuse step steps with it. ZeRO-1 is refused for now: each rank's descent
/// gradients are averaged for its own shard only. Cost: 1 + 1/k passes a
/// step; one copy of the parameters and two of the gradients (g_v, and the
/// clean g kept for the refresh).
class LookSAM : public SAM {
 public:
  explicit LookSAM(Params& params);
  std::string name() const override { return "looksam"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;
  std::string why_synced_ascent() const override {
    return "steps with the ascent gradient between refreshes, which must be the same on every rank";
  }

 private:
  int64_t k_ = 5;
  double alpha_ = 0.7;
};

class LookSAMOptimizer : public SAMOptimizer {
 public:
  LookSAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, int64_t k, double alpha);

  ParameterStates variant_states(const ParameterNumbering& numbering) const override;
  void load_variant_states(const ParameterStates& states, const ParameterNumbering& numbering) override;
  StateDict variant_values() const override;
  void load_variant_values(const StateDict& values) override;

 protected:
  bool descend(std::vector<GroupView>& groups) override;
  void adjust_descent_gradients(std::vector<GroupView>& groups) override;

 private:
  int64_t k_;
  double alpha_;
  int64_t looks_ = 0;               // SAM-path steps so far: refresh when looks_ % k == 0
  double orthogonal_norm_ = -1;     // ||g_v||; -1 before the first refresh
  bool refresh_pending_ = false;    // a refresh's descent has not completed yet
  CleanGradients clean_;
  ParameterBuffers orthogonal_{"orthogonal_gradient"};
};

}  // namespace basin
