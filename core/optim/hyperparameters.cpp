#include "basin/core/optim/hyperparameters.h"

#include <stdexcept>
#include <tuple>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

namespace basin {

namespace {

// One accessor per (options type, name): reads and writes through the typed API.
template <class Options>
struct Field {
  const char* name;
  double (*get)(const Options&);
  void (*set)(Options&, double);
};

#define BASIN_FIELD(Options, name) \
  Field<Options> { #name, [](const Options& o) { return static_cast<double>(o.name()); }, \
                   [](Options& o, double v) { o.name(v); } }

template <class Options>
Field<Options> beta(const char* name, int which) {
  if (which == 1) {
    return {name, [](const Options& o) { return std::get<0>(o.betas()); },
            [](Options& o, double v) { o.betas(std::make_tuple(v, std::get<1>(o.betas()))); }};
  }
  return {name, [](const Options& o) { return std::get<1>(o.betas()); },
          [](Options& o, double v) { o.betas(std::make_tuple(std::get<0>(o.betas()), v)); }};
}

template <class Options>
const std::vector<Field<Options>>& fields();

template <>
const std::vector<Field<torch::optim::SGDOptions>>& fields() {
  using O = torch::optim::SGDOptions;
  static const std::vector<Field<O>> f = {BASIN_FIELD(O, lr), BASIN_FIELD(O, momentum),
                                          BASIN_FIELD(O, dampening), BASIN_FIELD(O, weight_decay)};
  return f;
}

template <>
const std::vector<Field<torch::optim::AdamOptions>>& fields() {
  using O = torch::optim::AdamOptions;
  static const std::vector<Field<O>> f = {BASIN_FIELD(O, lr), beta<O>("beta1", 1), beta<O>("beta2", 2),
                                          BASIN_FIELD(O, eps), BASIN_FIELD(O, weight_decay)};
  return f;
}

template <>
const std::vector<Field<torch::optim::AdamWOptions>>& fields() {
  using O = torch::optim::AdamWOptions;
  static const std::vector<Field<O>> f = {BASIN_FIELD(O, lr), beta<O>("beta1", 1), beta<O>("beta2", 2),
                                          BASIN_FIELD(O, eps), BASIN_FIELD(O, weight_decay)};
  return f;
}

template <>
const std::vector<Field<torch::optim::RMSpropOptions>>& fields() {
  using O = torch::optim::RMSpropOptions;
  static const std::vector<Field<O>> f = {BASIN_FIELD(O, lr), BASIN_FIELD(O, alpha), BASIN_FIELD(O, eps),
                                          BASIN_FIELD(O, weight_decay), BASIN_FIELD(O, momentum)};
  return f;
}

template <>
const std::vector<Field<torch::optim::AdagradOptions>>& fields() {
  using O = torch::optim::AdagradOptions;
  static const std::vector<Field<O>> f = {BASIN_FIELD(O, lr), BASIN_FIELD(O, lr_decay),
                                          BASIN_FIELD(O, weight_decay), BASIN_FIELD(O, eps)};
  return f;
}

#undef BASIN_FIELD

// Visits `options` as whichever known type it is; returns false for unknown types.
template <class Visitor>
bool visit(const torch::optim::OptimizerOptions& options, Visitor&& visitor) {
  using namespace torch::optim;
  if (auto* o = dynamic_cast<const SGDOptions*>(&options)) return visitor(*o, fields<SGDOptions>()), true;
  if (auto* o = dynamic_cast<const AdamOptions*>(&options)) return visitor(*o, fields<AdamOptions>()), true;
  if (auto* o = dynamic_cast<const AdamWOptions*>(&options)) return visitor(*o, fields<AdamWOptions>()), true;
  if (auto* o = dynamic_cast<const RMSpropOptions*>(&options)) return visitor(*o, fields<RMSpropOptions>()), true;
  if (auto* o = dynamic_cast<const AdagradOptions*>(&options)) return visitor(*o, fields<AdagradOptions>()), true;
  return false;
}

const NamedHyperparameters* as_named(const torch::optim::OptimizerOptions& options) {
  return dynamic_cast<const NamedHyperparameters*>(&options);
}

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

[[noreturn]] void unknown(const torch::optim::OptimizerOptions& options, const std::string& name) {
  throw std::invalid_argument("optimizer has no hyper-parameter '" + name + "'; it has: " +
                              list(hyperparameter_names(options)));
}

}  // namespace

std::vector<std::string> hyperparameter_names(const torch::optim::OptimizerOptions& options) {
  if (const auto* named = as_named(options)) return named->hyperparameter_names();
  std::vector<std::string> names;
  const bool known = visit(options, [&](const auto&, const auto& fs) {
    for (const auto& f : fs) names.emplace_back(f.name);
  });
  if (!known) names.emplace_back("lr");  // every OptimizerOptions has get_lr/set_lr
  return names;
}

bool has_hyperparameter(const torch::optim::OptimizerOptions& options, const std::string& name) {
  for (const auto& n : hyperparameter_names(options)) {
    if (n == name) return true;
  }
  return false;
}

double get_hyperparameter(const torch::optim::OptimizerOptions& options, const std::string& name) {
  if (const auto* named = as_named(options)) {
    if (!named->has_hyperparameter(name)) unknown(options, name);
    return named->hyperparameter(name);
  }
  double value = 0;
  bool found = false;
  const bool known = visit(options, [&](const auto& o, const auto& fs) {
    for (const auto& f : fs) {
      if (name == f.name) { value = f.get(o); found = true; }
    }
  });
  if (!known && name == "lr") return options.get_lr();
  if (!found) unknown(options, name);
  return value;
}

void set_hyperparameter(torch::optim::OptimizerOptions& options, const std::string& name, double value) {
  if (auto* named = dynamic_cast<NamedHyperparameters*>(&options)) {
    if (!named->has_hyperparameter(name)) unknown(options, name);
    named->set_hyperparameter(name, value);
    return;
  }
  bool found = false;
  const bool known = visit(options, [&](const auto& o, const auto& fs) {
    using Options = std::decay_t<decltype(o)>;
    for (const auto& f : fs) {
      if (name == f.name) { f.set(const_cast<Options&>(o), value); found = true; }
    }
  });
  if (!known && name == "lr") return options.set_lr(value);
  if (!found) unknown(options, name);
}

std::vector<std::string> HyperparameterMap::hyperparameter_names() const {
  std::vector<std::string> names;
  for (const auto& entry : values_) names.push_back(entry.first);
  return names;
}

double HyperparameterMap::hyperparameter(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    throw std::invalid_argument("optimizer has no hyper-parameter '" + name + "'; it has: " +
                                list(hyperparameter_names()));
  }
  return it->second;
}

void HyperparameterMap::set_hyperparameter(const std::string& name, double value) { values_[name] = value; }

}  // namespace basin
