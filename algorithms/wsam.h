#pragma once

#include <vector>

#include "basin/algorithms/clean_gradients.h"
#include "basin/algorithms/sam.h"

namespace basin {

/// Weighted SAM (Yue et al., KDD 2023): sharpness as a regularizer of weight
/// gamma, L(w) + gamma / (1 - gamma) * (L(w + e) - L(w)). With
/// a = gamma / (1 - gamma) and s = g(w + e) - g(w), as the authors' code:
///   "decouple": true   the base optimizer steps with the clean g(w) (its
///                      momentum, moments and weight decay see g alone), then
///                      w -= lr * a * s, a plain step of the group's lr
///   "decouple": false  the base optimizer steps with g(w) + a * s
///
///     {"algorithms": {"wsam": {"gamma": 0.9, "decouple": true, "rho": 0.05, ...SAM's other keys}}}
///
/// Under data-parallel training g(w) must be the synced one ("sync_ascent"
/// stays true), or replicas would drift. Under ZeRO-1 the decoupled step
/// moves this rank's shard and the owners broadcast again (one more
/// all-gather per step). Cost: one more copy of the gradients.
class WSAM : public SAM {
 public:
  explicit WSAM(Params& params);
  std::string name() const override { return "wsam"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;
  std::string why_synced_ascent() const override {
    return "combines the clean gradient into the descent gradient, which must be the same on every rank";
  }

 private:
  double gamma_ = 0.9;
  bool decouple_ = true;
};

class WSAMOptimizer : public SAMOptimizer {
 public:
  WSAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double gamma, bool decouple);

 protected:
  std::vector<Perturbation> perturbation(std::vector<GroupView>& groups) override;
  void adjust_descent_gradients(std::vector<GroupView>& groups) override;
  void after_base_step() override;

 private:
  double weight_;  // gamma / (1 - gamma)
  bool decouple_;
  CleanGradients clean_;
  /// The decoupled step to take after the base's: parameter, s, lr * weight.
  struct SharpnessStep {
    at::Tensor param;
    at::Tensor sharpness;
    double scale;
  };
  std::vector<SharpnessStep> pending_;
};

}  // namespace basin
