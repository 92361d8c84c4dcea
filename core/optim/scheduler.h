#pragma once

#include <memory>
#include <string>
#include <vector>

#include "basin/core/base/state_dict.h"
#include "basin/core/config/config.h"
#include "basin/core/optim/schedule.h"

namespace torch::optim { class Optimizer; }

namespace basin {

/// Drives one numeric group hyper-parameter ("lr" by default; "rho",
/// "weight_decay", "momentum", ... work too) of an optimizer along a Schedule.
/// It lives in core, beside the engine, because the loop steps it; the
/// shapes it follows are the plug-ins of schedulers/.
///
///     {"name": "cosine_warmup", "warmup": 100, "hyperparameter": "lr", "interval": "step", "minimum": 0}
///
/// The value is minimum + (base - minimum) * factor(t): a factor of 1 gives
/// the base, 0 the minimum. With the lr's schedule and "hyperparameter":
/// "rho", rho follows the lr as GSAM's does (rho_min at lr 0).
///
/// It binds no optimizer: each call names the one to drive, so a scheduler
/// can never act on a stale object after SAM or sharding wrapped the
/// optimizer. Base values are the groups' values at `attach`; groups added
/// later get theirs when first seen.
class Scheduler {
 public:
  enum class Interval { kStep, kEpoch };

  Scheduler(std::shared_ptr<Schedule> schedule, std::string hyperparameter = "lr",
            Interval interval = Interval::kStep, double minimum = 0);

  /// Records each group's current value as its base (unless a loaded state
  /// gave one) and applies the current factor. `horizon` is the run's length
  /// in this scheduler's units.
  void attach(torch::optim::Optimizer& optimizer, int64_t horizon);
  /// Advances one unit and applies the new value.
  void step(torch::optim::Optimizer& optimizer);
  /// Writes base * factor(t) into every group.
  void apply(torch::optim::Optimizer& optimizer);

  double factor() const { return schedule_->factor(count_); }
  int64_t count() const { return count_; }
  const std::string& hyperparameter() const { return hyperparameter_; }
  Interval interval() const { return interval_; }
  const Schedule& schedule() const { return *schedule_; }

  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  std::shared_ptr<Schedule> schedule_;
  std::string hyperparameter_;
  Interval interval_;
  double minimum_;
  int64_t count_ = 0;
  std::vector<double> base_values_;
};

/// Builds a scheduler from its config entry: "name" picks the schedule,
/// "hyperparameter", "interval" ("step" or "epoch") and "minimum" the rest.
std::shared_ptr<Scheduler> make_scheduler(Params& config);

}  // namespace basin
