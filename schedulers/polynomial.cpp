#include <algorithm>
#include <cmath>

#include "basin/core/optim/schedule.h"

namespace basin {
namespace {

/// (1 - t/total)^power from 1 down to final_factor at `total` (the whole run if omitted).
class Polynomial : public Schedule {
 public:
  explicit Polynomial(Params& p)
      : given_total_(p.integer("total", 0, 0)), total_(given_total_), power_(p.number("power", 1.0, 0)), final_(p.number("final_factor", 0.0, 0, 1)) {}
  void set_horizon(int64_t units) override {
    total_ = given_total_ != 0 ? given_total_ : std::max<int64_t>(units, 1);
  }
  double factor(int64_t t) const override {
    const double remaining = 1.0 - std::min(static_cast<double>(t) / static_cast<double>(std::max<int64_t>(total_, 1)), 1.0);
    return final_ + (1.0 - final_) * std::pow(remaining, power_);
  }

 private:
  int64_t given_total_;  // 0: the run's horizon
  int64_t total_;
  double power_;
  double final_;
};

BASIN_REGISTER(schedule_registry(), "polynomial", Polynomial);

}  // namespace
}  // namespace basin
