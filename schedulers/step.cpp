#include <cmath>

#include "basin/core/optim/schedule.h"

namespace basin {
namespace {

/// gamma ^ floor(t / step_size): decays by gamma every step_size units.
class StepDecay : public Schedule {
 public:
  explicit StepDecay(Params& p)
      : step_size_(p.integer("step_size", 1, 1)), gamma_(p.number("gamma", 0.1, 0)) {
    if (!p.has("step_size")) throw ConfigError("config key '" + p.path_of("step_size") + "' is required (an integer >= 1)");
  }
  double factor(int64_t t) const override { return std::pow(gamma_, static_cast<double>(t / step_size_)); }

 private:
  int64_t step_size_;
  double gamma_;
};

BASIN_REGISTER(schedule_registry(), "step", StepDecay);

}  // namespace
}  // namespace basin
