#include <algorithm>
#include <cmath>

#include "basin/core/optim/schedule.h"

namespace basin {
namespace {

/// gamma ^ (number of milestones <= t).
class MultiStep : public Schedule {
 public:
  explicit MultiStep(Params& p) : milestones_(p.integers("milestones", {})), gamma_(p.number("gamma", 0.1, 0)) {
    if (milestones_.empty() || !std::is_sorted(milestones_.begin(), milestones_.end()) || milestones_.front() < 1) {
      p.fail("milestones", "a non-empty increasing array of integers >= 1", p.raw("milestones"));
    }
  }
  double factor(int64_t t) const override {
    const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), t) - milestones_.begin();
    return std::pow(gamma_, static_cast<double>(passed));
  }

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

BASIN_REGISTER(schedule_registry(), "multistep", MultiStep);

}  // namespace
}  // namespace basin
