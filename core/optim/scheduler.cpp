#include "basin/core/optim/scheduler.h"

#include <stdexcept>

#include <torch/optim/optimizer.h>

#include "basin/core/optim/hyperparameters.h"

namespace basin {

Registry<Schedule>& schedule_registry() {
  static Registry<Schedule> registry("scheduler");
  return registry;
}

Scheduler::Scheduler(std::shared_ptr<Schedule> schedule, std::string hyperparameter, Interval interval, double minimum)
    : schedule_(std::move(schedule)), hyperparameter_(std::move(hyperparameter)), interval_(interval), minimum_(minimum) {}

void Scheduler::attach(torch::optim::Optimizer& optimizer, int64_t horizon) {
  schedule_->set_horizon(horizon);
  apply(optimizer);  // groups without a base value (all, unless loaded) take their current one
}

void Scheduler::step(torch::optim::Optimizer& optimizer) {
  ++count_;
  apply(optimizer);
}

void Scheduler::apply(torch::optim::Optimizer& optimizer) {
  auto& groups = optimizer.param_groups();
  for (std::size_t i = base_values_.size(); i < groups.size(); ++i) {
    base_values_.push_back(get_hyperparameter(groups[i].options(), hyperparameter_));
  }
  const double f = schedule_->factor(count_);
  for (std::size_t i = 0; i < groups.size(); ++i) {
    set_hyperparameter(groups[i].options(), hyperparameter_, minimum_ + (base_values_[i] - minimum_) * f);
  }
}

StateDict Scheduler::state_dict() const {
  StateDict state = new_state_dict();
  state.insert("count", count_);
  state.insert("hyperparameter", hyperparameter_);
  state.insert("base_values", c10::List<double>(base_values_));
  return state;
}

void Scheduler::load_state_dict(const StateDict& state) {
  const std::string saved = state.at("hyperparameter").toStringRef();
  if (saved != hyperparameter_) {
    throw std::invalid_argument("scheduler state drives '" + saved + "', this scheduler '" + hyperparameter_ + "'");
  }
  count_ = state.at("count").toInt();
  const auto values = state.at("base_values").toDoubleList();
  base_values_.assign(values.begin(), values.end());
}

std::shared_ptr<Scheduler> make_scheduler(Params& config) {
  const std::string name = config.string("name");
  const std::string hyperparameter = config.string("hyperparameter", "lr");
  const std::string interval = config.choice("interval", "step", {"step", "epoch"});
  const double minimum = config.number("minimum", 0.0);
  auto schedule = schedule_registry().create(name, config);
  return std::make_shared<Scheduler>(std::move(schedule), hyperparameter,
                                     interval == "step" ? Scheduler::Interval::kStep : Scheduler::Interval::kEpoch,
                                     minimum);
}

}  // namespace basin
