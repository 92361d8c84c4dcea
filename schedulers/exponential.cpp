#include <cmath>

#include "basin/core/optim/schedule.h"

namespace basin {
namespace {

/// gamma ^ t.
class Exponential : public Schedule {
 public:
  explicit Exponential(Params& p) : gamma_(p.number("gamma", 0.99, 0)) {}
  double factor(int64_t t) const override { return std::pow(gamma_, static_cast<double>(t)); }

 private:
  double gamma_;
};

BASIN_REGISTER(schedule_registry(), "exponential", Exponential);

}  // namespace
}  // namespace basin
