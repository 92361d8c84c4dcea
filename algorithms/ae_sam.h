#pragma once

#include "basin/algorithms/sam.h"

namespace basin {

/// AE-SAM (Jiang et al., ICLR 2023): SAM's second pass only where the loss
/// looks sharp. After the ascent pass, with n = ||g||^2 of the batch:
///     mu  = delta * mu  + (1 - delta) * n                (mu first, from 0)
///     var = delta * var + (1 - delta) * (n - mu)^2
///     a SAM step if n >= mu + c_t * sqrt(var), else a plain step with g,
///     c_t = (t/T) * lambda1 + (1 - t/T) * lambda2 over the run's T steps,
/// so with lambda1 < lambda2 the share of SAM steps grows through training.
/// No code of the authors is public: this is the paper's rule.
///
///     {"algorithms": {"ae_sam": {"delta": 0.9, "lambda1": -1, "lambda2": 1, "rho": 0.05, ...SAM's other keys}}}
///
/// mu and var are saved in checkpoints; the share of SAM steps is
/// `sam_steps / steps` of the optimizer. Under data-parallel training the
/// ascent is synced ("sync_ascent" stays true): every rank decides alike.
class AESAM : public SAM {
 public:
  explicit AESAM(Params& params);
  std::string name() const override { return "ae_sam"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;
  std::string why_synced_ascent() const override {
    return "decides from the ascent gradient and steps with it, which must be the same on every rank";
  }

 private:
  double delta_ = 0.9;
  double lambda1_ = -1;
  double lambda2_ = 1;
};

class AESAMOptimizer : public SAMOptimizer {
 public:
  /// `run_steps`: T, the run's length in steps (0: c_t stays lambda2).
  AESAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double delta, double lambda1,
                 double lambda2, int64_t run_steps);

  StateDict variant_values() const override;
  void load_variant_values(const StateDict& values) override;

 protected:
  bool descend(std::vector<GroupView>& groups) override;

 private:
  double delta_, lambda1_, lambda2_;
  int64_t run_steps_;
  double mean_ = 0;      // of ||g||^2
  double variance_ = 0;  // of ||g||^2
};

}  // namespace basin
