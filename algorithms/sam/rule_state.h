#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/algorithms/sam/parameter_buffers.h"
#include "basin/core/optim/optimizer_state.h"

namespace basin {

/// What a SAM rule keeps between steps, declared once (in the variant's
/// constructor) as the members that hold it, so that checkpoints save and
/// load it without a hook per variant: per-parameter buffers, and named
/// numbers (AE-SAM's running moments, LookSAM's counter), and named tensors
/// that belong to no parameter (Bi-LoRA's auxiliary adapters), the same on
/// every rank.
class RuleState {
 public:
  void keep(ParameterBuffers& buffers) { buffers_.push_back(&buffers); }
  void keep(const std::string& name, double& value) { numbers_.emplace_back(name, &value); }
  void keep(const std::string& name, int64_t& value) { counts_.emplace_back(name, &value); }
  /// Loaded in place (copy_), so a tensor others hold keeps its identity.
  void keep(const std::string& name, at::Tensor& value) { tensors_.emplace_back(name, &value); }

  /// Where `step` places a synced gradient on its owner or in rows (zero2,
  /// zero3, hsdp), each owner's buffers are gathered first (collective; see
  /// save_from_owners).
  ParameterStates parameters(const ParameterNumbering& numbering, StepView& step) const;
  void load_parameters(const ParameterStates& states, const ParameterNumbering& numbering);
  StateDict values() const;
  /// Throws std::invalid_argument naming a value `values` lacks or holds as
  /// another type (or a tensor of another shape).
  void load_values(const StateDict& values);

 private:
  std::vector<ParameterBuffers*> buffers_;
  std::vector<std::pair<std::string, double*>> numbers_;
  std::vector<std::pair<std::string, int64_t*>> counts_;
  std::vector<std::pair<std::string, at::Tensor*>> tensors_;
};

}  // namespace basin
