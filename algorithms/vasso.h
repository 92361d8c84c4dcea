#pragma once

#include "basin/algorithms/moving_average_sam.h"
#include "basin/algorithms/sam.h"

namespace basin {

/// VaSSO, variance-suppressed SAM (Li and Giannakis, NeurIPS 2023): the
/// ascent follows an exponential moving average d of the gradients rather
/// than the noisy g. As the authors' code: d = g on the first SAM step, then
/// d = (1 - theta) * d + theta * g (updated before use); e = rho * d /
/// (||d|| + epsilon), with their epsilon 1e-7.
///
///     {"algorithms": {"vasso": {"theta": 0.9, "rho": 0.05, "epsilon": 1e-7, ...SAM's other keys}}}
///
/// d is saved in checkpoints; under data-parallel training the ascent is
/// synced ("sync_ascent" stays true) so that d is the same on every rank.
/// Cost: one more copy of the parameters.
class VaSSO : public SAM {
 public:
  explicit VaSSO(Params& params);
  std::string name() const override { return "vasso"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;
  std::string why_synced_ascent() const override {
    return "keeps a moving average of the ascent gradients, which a checkpoint saves once for every rank";
  }

 private:
  double theta_ = 0.9;
};

class VaSSOOptimizer : public MovingAverageSAMOptimizer {
 public:
  VaSSOOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double theta);

 protected:
  at::Tensor direction(const at::Tensor& grad, at::Tensor& average) override;

 private:
  double theta_;
};

}  // namespace basin
