#pragma once

#include "basin/algorithms/moving_average_sam.h"
#include "basin/algorithms/sam.h"

namespace basin {

/// Friendly SAM (Li et al., CVPR 2024): the ascent leaves out the full
/// gradient's component, estimated by an exponential moving average m of
/// past raw gradients. As the authors' code:
///   first SAM step   m = g, e from g (plain SAM)
///   later            d = g - sigma * m (m from the steps before), then
///                    m = lambda * m + (1 - lambda) * g (the raw g, not d);
///                    e = rho * d / (||d|| + epsilon)
///
///     {"algorithms": {"friendly_sam": {"sigma": 1.0, "lambda": 0.9, "rho": 0.05, ...SAM's other keys}}}
///
/// m is saved in checkpoints. Under data-parallel training the ascent is
/// synced ("sync_ascent" stays true): m is then the same on every rank, and
/// a checkpoint holds it once. Cost: one more copy of the parameters.
class FriendlySAM : public SAM {
 public:
  explicit FriendlySAM(Params& params);
  std::string name() const override { return "friendly_sam"; }

 protected:
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                               const SAMOptions& options, const State& state) override;
  std::string why_synced_ascent() const override {
    return "keeps a moving average of the ascent gradients, which a checkpoint saves once for every rank";
  }

 private:
  double sigma_ = 1.0;
  double lambda_ = 0.9;
};

class FriendlySAMOptimizer : public MovingAverageSAMOptimizer {
 public:
  FriendlySAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double sigma, double lambda);

 protected:
  at::Tensor direction(const at::Tensor& grad, at::Tensor& average) override;

 private:
  double sigma_;
  double lambda_;
};

}  // namespace basin
