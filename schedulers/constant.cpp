#include "basin/core/optim/schedule.h"

namespace basin {
namespace {

/// `factor` for the first `steps` units (all of them when steps is 0), then 1.
class Constant : public Schedule {
 public:
  explicit Constant(Params& p) : factor_(p.number("factor", 1.0, 0)), steps_(p.integer("steps", 0, 0)) {}
  double factor(int64_t t) const override { return steps_ == 0 || t < steps_ ? factor_ : 1.0; }

 private:
  double factor_;
  int64_t steps_;
};

BASIN_REGISTER(schedule_registry(), "constant", Constant);

}  // namespace
}  // namespace basin
