#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

namespace basin {

/// Keeps a wrapping optimizer's param groups and its base's as one source of
/// truth for every hyper-parameter.
///
/// LibTorch clones group options in every optimizer, so a wrapper (SAM, the
/// sharded optimizer) cannot share its base's groups as Python does. Instead
/// the wrapper's groups mirror the base's (same tensors, HyperparameterMap
/// options holding the base's numbers plus the wrapper's own, like "rho"),
/// and `sync` runs before every step:
///   - a value changed on one side since the last sync is copied to the other;
///     when both changed, the wrapper's value wins;
///   - a group added to either side is added to the other.
/// So whatever a scheduler or the user sets, on the wrapper or on the base,
/// is what the base step uses.
class GroupSync {
 public:
  /// Which of a wrapper group's parameters the base holds (the sharded
  /// optimizer's base holds this rank's shard only).
  using BaseParams = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

  /// `extras` are the wrapper-only hyper-parameters and their defaults.
  explicit GroupSync(std::map<std::string, double> extras, BaseParams base_params = nullptr);

  /// Wrapper groups mirroring `base`'s, for the wrapper's constructor.
  std::vector<torch::optim::OptimizerParamGroup> mirror_groups(const torch::optim::Optimizer& base) const;
  /// Wrapper defaults mirroring `base`'s defaults.
  std::unique_ptr<torch::optim::OptimizerOptions> mirror_defaults(const torch::optim::Optimizer& base) const;

  /// Records both sides as in sync; call once the wrapper is built.
  void start(const torch::optim::Optimizer& wrapper, const torch::optim::Optimizer& base);
  /// Two-way synchronisation described above.
  void sync(torch::optim::Optimizer& wrapper, torch::optim::Optimizer& base);

 private:
  std::map<std::string, double> mirror_values(const torch::optim::OptimizerOptions& base_options) const;

  std::map<std::string, double> extras_;
  BaseParams base_params_;
  std::vector<std::map<std::string, double>> last_synced_;  // per group: base hyper-parameters
};

}  // namespace basin
