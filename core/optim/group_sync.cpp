#include "basin/core/optim/group_sync.h"

#include <stdexcept>

#include "basin/core/optim/hyperparameters.h"

namespace basin {

using torch::optim::OptimizerParamGroup;

GroupSync::GroupSync(std::map<std::string, double> extras, BaseParams base_params)
    : extras_(std::move(extras)), base_params_(std::move(base_params)) {}

std::map<std::string, double> GroupSync::mirror_values(const torch::optim::OptimizerOptions& base_options) const {
  std::map<std::string, double> values = extras_;
  for (const auto& name : hyperparameter_names(base_options)) values[name] = get_hyperparameter(base_options, name);
  return values;
}

std::vector<OptimizerParamGroup> GroupSync::mirror_groups(const torch::optim::Optimizer& base) const {
  std::vector<OptimizerParamGroup> groups;
  for (const auto& group : base.param_groups()) {
    groups.emplace_back(group.params(), std::make_unique<HyperparameterMap>(mirror_values(group.options())));
  }
  return groups;
}

std::unique_ptr<torch::optim::OptimizerOptions> GroupSync::mirror_defaults(const torch::optim::Optimizer& base) const {
  return std::make_unique<HyperparameterMap>(mirror_values(base.defaults()));
}

void GroupSync::start(const torch::optim::Optimizer& /*wrapper*/, const torch::optim::Optimizer& base) {
  last_synced_.clear();
  for (const auto& group : base.param_groups()) {
    std::map<std::string, double> values;
    for (const auto& name : hyperparameter_names(group.options())) values[name] = get_hyperparameter(group.options(), name);
    last_synced_.push_back(std::move(values));
  }
}

void GroupSync::sync(torch::optim::Optimizer& wrapper, torch::optim::Optimizer& base) {
  auto& front = wrapper.param_groups();
  auto& back = base.param_groups();
  // Groups added to the base: the wrapper mirrors them.
  while (front.size() < back.size()) {
    const auto& added = back[front.size()];
    wrapper.add_param_group(OptimizerParamGroup(added.params(), std::make_unique<HyperparameterMap>(mirror_values(added.options()))));
  }
  // Groups added to the wrapper: the base gets one with its defaults, then the wrapper's values.
  while (back.size() < front.size()) {
    auto& added = front[back.size()];
    auto* values = dynamic_cast<HyperparameterMap*>(&added.options());
    if (values == nullptr) {
      front.pop_back();  // a rejected group must not poison every later step
      throw std::invalid_argument(
          "a param group added to a wrapping optimizer (SAM) needs no options, to take the defaults, or "
          "basin::HyperparameterMap options; add it to the base optimizer instead to use its own options type");
    }
    auto options = base.defaults().clone();
    for (const auto& name : hyperparameter_names(*options)) {
      if (values->has_hyperparameter(name)) {
        set_hyperparameter(*options, name, values->hyperparameter(name));
      } else {
        values->set_hyperparameter(name, get_hyperparameter(*options, name));
      }
    }
    for (const auto& [name, value] : extras_) {
      if (!values->has_hyperparameter(name)) values->set_hyperparameter(name, value);
    }
    try {
      base.add_param_group(
          OptimizerParamGroup(base_params_ ? base_params_(added.params()) : added.params(), std::move(options)));
    } catch (...) {
      front.pop_back();
      throw;
    }
  }
  // A group that appeared (either way) is in sync as it stands now.
  for (std::size_t i = last_synced_.size(); i < back.size(); ++i) {
    std::map<std::string, double> values;
    for (const auto& name : hyperparameter_names(back[i].options())) values[name] = get_hyperparameter(back[i].options(), name);
    for (auto& [name, value] : values) {
      if (has_hyperparameter(front[i].options(), name)) set_hyperparameter(front[i].options(), name, value);
    }
    last_synced_.push_back(std::move(values));
  }
  for (std::size_t i = 0; i < back.size(); ++i) {
    auto& w = front[i].options();
    auto& b = back[i].options();
    for (auto& [name, last] : last_synced_[i]) {
      const double wv = get_hyperparameter(w, name);
      const double bv = get_hyperparameter(b, name);
      if (wv != last) {
        set_hyperparameter(b, name, wv);
        last = wv;
      } else if (bv != last) {
        set_hyperparameter(w, name, bv);
        last = bv;
      }
    }
  }
}

}  // namespace basin
