#include <algorithm>
#include <cmath>

#include "basin/core/optim/schedule.h"
#include "basin/schedulers/warmup.h"

namespace basin {
namespace {

/// Linear warmup from start_factor over `warmup` units, then a half cosine
/// from 1 down to final_factor at unit `total` (the whole run if omitted).
class CosineWarmup : public Schedule {
 public:
  explicit CosineWarmup(Params& p)
      : warmup_(p.integer("warmup", 0, 0)),
        given_total_(p.integer("total", 0, 0)),
        total_(given_total_),
        start_(p.number("start_factor", 0.0, 0, 1)),
        final_(p.number("final_factor", 0.0, 0, 1)) {
    if (given_total_ != 0 && given_total_ <= warmup_) p.fail("total", "an integer > warmup (" + std::to_string(warmup_) + ")", p.raw("total"));
  }
  void set_horizon(int64_t units) override {
    total_ = given_total_ != 0 ? given_total_ : std::max(units, warmup_ + 1);
  }
  double factor(int64_t t) const override {
    if (t < warmup_) return linear_ramp(t, warmup_, start_);
    const double span = static_cast<double>(std::max<int64_t>(total_ - warmup_, 1));
    const double progress = std::min(static_cast<double>(t - warmup_) / span, 1.0);
    return final_ + (1.0 - final_) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }

 private:
  int64_t warmup_;
  int64_t given_total_;  // 0: the run's horizon
  int64_t total_;
  double start_;
  double final_;
};

BASIN_REGISTER(schedule_registry(), "cosine_warmup", CosineWarmup);

}  // namespace
}  // namespace basin
