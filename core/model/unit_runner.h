#pragma once

#include <functional>

#include <ATen/core/Tensor.h>

namespace basin {

/// Runs a model's forward and its units' (blocks declared with
/// Model::declare_unit) under fully sharded training (FullyShardedModel):
/// each unit's parameters exist whole only while it runs forward or
/// backward. Without a runner a unit is a plain call.
class UnitRunner {
 public:
  virtual ~UnitRunner() = default;
  /// The whole forward: the parameters that belong to no unit are gathered
  /// for it (and, when autograd records, kept until their backward).
  virtual at::Tensor run_model(const std::function<at::Tensor()>& forward) = 0;
  /// One unit's forward, `unit` its index in declaration order. A unit may
  /// run more than once in a forward (a tied embedding's head).
  virtual at::Tensor run_unit(std::size_t unit, const std::function<at::Tensor()>& forward) = 0;
  /// A lookup into the unit's table (an embedding's rows by id), whose
  /// backward reads none of its parameters: it is whole for the lookup
  /// alone, and backward does not gather it for this use.
  virtual at::Tensor run_lookup(std::size_t unit, const std::function<at::Tensor()>& forward) = 0;
  /// A checkpointed unit's forward, run again in backward (its backward
  /// follows): the unit is whole for it and stays whole for that backward.
  virtual at::Tensor recompute_unit(std::size_t unit, const std::function<at::Tensor()>& forward) = 0;
};

}  // namespace basin
