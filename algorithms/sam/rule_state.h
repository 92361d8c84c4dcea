#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/optimizer_state.h"

namespace basin {

/// One tensor per parameter that a SAM rule keeps between steps (a moving
/// average of gradients), saved by parameter index under `name` in the
/// PyTorch-style layout of optimizer state: {index: {name: tensor}}.
class ParameterBuffers {
 public:
  explicit ParameterBuffers(std::string name) : name_(std::move(name)) {}

  /// The buffer of `param`: undefined until the rule sets it.
  at::Tensor& of(const at::Tensor& param) { return buffers_[param.unsafeGetTensorImpl()]; }

  /// Adds each defined buffer, on the CPU, to `states`.
  void save(ParameterStates& states, const ParameterNumbering& numbering) const;
  /// Takes the buffers `states` holds under this name, each on its
  /// parameter's device and in its dtype; a parameter without one starts
  /// afresh. Throws std::invalid_argument for a mis-shaped entry.
  void load(const ParameterStates& states, const ParameterNumbering& numbering);

 private:
  std::string name_;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> buffers_;
};

/// What a SAM rule keeps between steps, declared once (in the variant's
/// constructor) as the members that hold it, so that checkpoints save and
/// load it without a hook per variant: per-parameter buffers, and named
/// numbers (AE-SAM's running moments, LookSAM's counter).
class RuleState {
 public:
  void keep(ParameterBuffers& buffers) { buffers_.push_back(&buffers); }
  void keep(const std::string& name, double& value) { numbers_.emplace_back(name, &value); }
  void keep(const std::string& name, int64_t& value) { counts_.emplace_back(name, &value); }

  ParameterStates parameters(const ParameterNumbering& numbering) const;
  void load_parameters(const ParameterStates& states, const ParameterNumbering& numbering);
  StateDict values() const;
  /// Throws std::invalid_argument naming a value `values` lacks or holds as another type.
  void load_values(const StateDict& values);

 private:
  std::vector<ParameterBuffers*> buffers_;
  std::vector<std::pair<std::string, double*>> numbers_;
  std::vector<std::pair<std::string, int64_t*>> counts_;
};

}  // namespace basin
