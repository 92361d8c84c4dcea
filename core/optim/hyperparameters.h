#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

namespace basin {

/// Numeric per-group hyper-parameters of an optimizer, by name.
///
/// LibTorch gives each optimizer its own options type with typed accessors;
/// schedulers, param-group configs and the group synchronisation of wrapping
/// optimizers need one vocabulary instead: "lr", "momentum", "weight_decay",
/// "beta1", "rho", ... These functions are it.

/// Options types of optimizers outside LibTorch implement this to take part.
class NamedHyperparameters {
 public:
  virtual ~NamedHyperparameters() = default;
  virtual std::vector<std::string> hyperparameter_names() const = 0;
  virtual bool has_hyperparameter(const std::string& name) const = 0;
  virtual double hyperparameter(const std::string& name) const = 0;
  virtual void set_hyperparameter(const std::string& name, double value) = 0;
};

/// The names `options` has, e.g. {"lr", "momentum", "dampening", "weight_decay"}.
std::vector<std::string> hyperparameter_names(const torch::optim::OptimizerOptions& options);
bool has_hyperparameter(const torch::optim::OptimizerOptions& options, const std::string& name);
/// Throws std::invalid_argument naming `name` and the names that exist.
double get_hyperparameter(const torch::optim::OptimizerOptions& options, const std::string& name);
void set_hyperparameter(torch::optim::OptimizerOptions& options, const std::string& name, double value);

/// Options that are only a map of names to numbers: what a wrapping optimizer
/// (SAM, the sharded optimizer) keeps per group, mirroring its base's
/// hyper-parameters and adding its own (rho).
class HyperparameterMap : public torch::optim::OptimizerCloneableOptions<HyperparameterMap>,
                          public NamedHyperparameters {
 public:
  HyperparameterMap() = default;
  explicit HyperparameterMap(std::map<std::string, double> values) : values_(std::move(values)) {}

  double get_lr() const override { return hyperparameter("lr"); }
  void set_lr(const double lr) override { set_hyperparameter("lr", lr); }

  std::vector<std::string> hyperparameter_names() const override;
  bool has_hyperparameter(const std::string& name) const override { return values_.count(name) != 0; }
  double hyperparameter(const std::string& name) const override;
  void set_hyperparameter(const std::string& name, double value) override;

  const std::map<std::string, double>& values() const { return values_; }

 private:
  std::map<std::string, double> values_;
};

}  // namespace basin
