#include <algorithm>
#include <memory>
#include <vector>

#include "basin/core/optim/schedule.h"

namespace basin {
namespace {

/// Runs schedules one after another: schedule k starts at milestones[k-1]
/// and sees its own t from 0.
///
///     {"name": "sequential", "milestones": [500],
///      "schedules": [{"name": "linear_warmup", "warmup": 500}, {"name": "exponential", "gamma": 0.999}]}
class Sequential : public Schedule {
 public:
  explicit Sequential(Params& p) : milestones_(p.integers("milestones", {})) {
    const Json entries = p.array("schedules");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Params child(entries[i], p.path_of("schedules[" + std::to_string(i) + "]"));
      const std::string name = child.string("name");
      schedules_.push_back(schedule_registry().create(name, child));
    }
    if (schedules_.empty()) p.fail("schedules", "a non-empty array of schedules", p.raw("schedules"));
    if (milestones_.size() + 1 != schedules_.size() || !std::is_sorted(milestones_.begin(), milestones_.end()) ||
        (!milestones_.empty() && milestones_.front() < 1)) {
      p.fail("milestones", std::to_string(schedules_.size() - 1) + " increasing integers >= 1 (one per schedule after the first)",
             p.raw("milestones"));
    }
  }
  void set_horizon(int64_t units) override {
    for (std::size_t k = 0; k < schedules_.size(); ++k) {
      const int64_t begin = k == 0 ? 0 : milestones_[k - 1];
      const int64_t end = k < milestones_.size() ? milestones_[k] : units;
      schedules_[k]->set_horizon(std::max<int64_t>(end - begin, 1));
    }
  }
  double factor(int64_t t) const override {
    const auto k = static_cast<std::size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), t) - milestones_.begin());
    return schedules_[k]->factor(k == 0 ? t : t - milestones_[k - 1]);
  }

 private:
  std::vector<int64_t> milestones_;
  std::vector<std::shared_ptr<Schedule>> schedules_;
};

BASIN_REGISTER(schedule_registry(), "sequential", Sequential);

}  // namespace
}  // namespace basin
