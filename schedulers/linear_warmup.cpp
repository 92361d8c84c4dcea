#include "basin/core/optim/schedule.h"
#include "basin/schedulers/warmup.h"

namespace basin {
namespace {

/// start_factor -> 1 linearly over `warmup` units, then 1.
class LinearWarmup : public Schedule {
 public:
  explicit LinearWarmup(Params& p)
      : warmup_(p.integer("warmup", 0, 1)), start_(p.number("start_factor", 0.0, 0, 1)) {
    if (!p.has("warmup")) throw ConfigError("config key '" + p.path_of("warmup") + "' is required (an integer >= 1)");
  }
  double factor(int64_t t) const override { return linear_ramp(t, warmup_, start_); }

 private:
  int64_t warmup_;
  double start_;
};

BASIN_REGISTER(schedule_registry(), "linear_warmup", LinearWarmup);

}  // namespace
}  // namespace basin
