#pragma once

#include <memory>
#include <vector>

#include "basin/algorithms/buffer_snapshot.h"
#include "basin/algorithms/sam_optimizer.h"
#include "basin/core/algorithm.h"

namespace basin {

/// SAM as a plug-in algorithm:
///
///     {"algorithms": {"sam": {"rho": 0.05, "epsilon": 1e-12, "adaptive": false, "eta": 0.01,
///                             "interval": 1, "sync_ascent": false, "freeze_running_stats": true}}}
///
/// On AFTER_SHARDING — after distribution has rebuilt the optimizer — it
/// wraps the state's optimizer in a SAMOptimizer, once. "rho" may be a list,
/// one value per param group. During the descent pass the model's buffers
/// (BatchNorm running statistics) are snapshotted and restored, so only the
/// ascent pass at w updates them ("freeze_running_stats": false turns that
/// off). "sync_ascent" chooses, under data-parallel training, whether the
/// ascent gradients are all-reduced (true) or rank-local as in the SAM paper
/// (false, the default); single-process training ignores it.
///
/// Variants subclass it and override `make_optimizer` to build their own
/// SAMOptimizer subclass.
class SAM : public Algorithm {
 public:
  explicit SAM(Params& params);

  std::string name() const override { return "sam"; }
  bool match(Event event, const State& state) const override;
  void apply(Event event, State& state, Logger& logger) override;

  /// The wrapper's counters; the per-parameter state and the groups'
  /// hyper-parameters (rho) travel with the optimizer's state.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  const SAMOptions& options() const { return options_; }
  bool sync_ascent() const { return sync_ascent_; }
  bool freeze_running_stats() const { return freeze_running_stats_; }
  /// The wrapper, once AFTER_SHARDING has run.
  const std::shared_ptr<SAMOptimizer>& optimizer() const { return optimizer_; }

 protected:
  virtual std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                       const SAMOptions& options);

 private:
  void wrap(State& state);

  SAMOptions options_;
  std::vector<double> group_rho_;
  bool sync_ascent_ = false;
  bool freeze_running_stats_ = true;
  std::shared_ptr<SAMOptimizer> optimizer_;
  BufferSnapshot running_stats_;
  bool outer_skip_gradient_sync_ = false;
};

}  // namespace basin
