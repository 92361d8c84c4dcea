#pragma once

#include <cstdint>

#include "basin/core/config/registry.h"

namespace basin {

/// The shape of a hyper-parameter over time: a multiplier of the value the
/// optimizer group had when its Scheduler attached. `t` counts the
/// scheduler's units (steps or epochs) from 0.
///
/// The contract of schedulers/: each kind registers by name in
/// `schedule_registry()`; a Scheduler applies one to an optimizer's groups.
class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual double factor(int64_t t) const = 0;
  /// Units the run will last, for schedules whose length the config left
  /// out (cosine over the whole run). Called before the first factor(), and
  /// again when a resumed run's length changed (another world size).
  virtual void set_horizon(int64_t /*units*/) {}
};

Registry<Schedule>& schedule_registry();

}  // namespace basin
