#pragma once

#include <string>
#include <unordered_map>
#include <utility>

#include <ATen/core/Tensor.h>

#include "basin/core/optim/optimizer_state.h"

namespace basin {

class StepView;

/// One tensor per parameter that a SAM rule keeps between steps (a moving
/// average of gradients), saved by parameter index under `name` in the
/// PyTorch-style layout of optimizer state: {index: {name: tensor}}.
class ParameterBuffers {
 public:
  explicit ParameterBuffers(std::string name) : name_(std::move(name)) {}
  /// Buffers kept by the owners of their parameters alone, under any
  /// sharding (ARWP's, from the synced gradients ZeRO-1 gives owners only):
  /// checkpoints gather them from the owners (save_from_owners).
  ParameterBuffers& held_by_owners() { return by_owners_ = true, *this; }
  bool by_owners() const { return by_owners_; }

  /// The buffer of `param`: undefined until the rule sets it.
  at::Tensor& of(const at::Tensor& param) { return buffers_[param.unsafeGetTensorImpl()]; }

  /// Adds each defined buffer, on the CPU, to `states`.
  void save(ParameterStates& states, const ParameterNumbering& numbering) const;
  /// As save(), where each rank holds the buffers of the parameters it owns
  /// only (ZeRO-2: they come from its gradients): every owner's are gathered
  /// first, so that rank 0's checkpoint holds them all. Collective.
  void save_from_owners(ParameterStates& states, const ParameterNumbering& numbering, StepView& step) const;
  /// Takes the buffers `states` holds under this name, each on its
  /// parameter's device and in its dtype; a parameter without one starts
  /// afresh. Throws std::invalid_argument for a mis-shaped entry.
  void load(const ParameterStates& states, const ParameterNumbering& numbering);

 private:
  std::string name_;
  bool by_owners_ = false;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> buffers_;
};

}  // namespace basin
