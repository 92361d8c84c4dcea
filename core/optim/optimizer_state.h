#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include "basin/core/base/state_dict.h"

namespace basin {

/// LibTorch keys Optimizer::state() by the tensor's address: as a string in
/// 1.x, as the pointer itself in later releases. The key type says which.
using OptimizerStateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
OptimizerStateKey optimizer_state_key(const at::Tensor& param);

/// Per-parameter optimizer state keyed by parameter index (int keys), as in
/// PyTorch's `optimizer.state_dict()["state"]`.
using ParameterStates = c10::impl::GenericDict;
ParameterStates new_parameter_states();

/// Parameters numbered as PyTorch numbers them in an optimizer's state_dict:
/// every parameter of the groups once, in group order. Indices, unlike
/// LibTorch's state keys (tensor addresses), mean the same in every process.
class ParameterNumbering {
 public:
  explicit ParameterNumbering(const torch::optim::Optimizer& optimizer);
  /// -1 when `param` is not one of them.
  int64_t index_of(const at::Tensor& param) const;
  const std::vector<at::Tensor>& parameters() const { return parameters_; }

 private:
  std::vector<at::Tensor> parameters_;
  std::unordered_map<const void*, int64_t> index_;
};

/// `optimizer`'s parameters, each once in group order (ParameterNumbering's
/// order): a tied weight (one tensor listed twice) counts once, in the
/// gradient sync, the checks and clipping alike.
std::vector<at::Tensor> unique_parameters(const torch::optim::Optimizer& optimizer);

/// An optimizer that keeps its per-parameter state in another one: a
/// wrapper's base (SAM), each rank's shard (ZeRO-1). Checkpoints reach the
/// state through it.
class WrappingOptimizer {
 public:
  virtual ~WrappingOptimizer() = default;
  /// Copies hyper-parameters changed on either side to the other, so the
  /// wrapper's groups hold the values the next step will use.
  virtual void sync_param_groups() = 0;
  /// The state of the parameters `numbering` numbers. Collective for a
  /// sharded optimizer: every rank calls it, rank 0 receives every shard's.
  virtual ParameterStates parameter_states(const ParameterNumbering& numbering) = 0;
  /// Restores what `states` holds for the parameters this optimizer (or this
  /// rank's shard) steps; the other entries are ignored.
  virtual void load_parameter_states(const ParameterStates& states, const ParameterNumbering& numbering) = 0;
};

/// The state of any optimizer: LibTorch's SGD, Adam, AdamW, RMSprop and
/// Adagrad directly (PyTorch's names: "momentum_buffer", "exp_avg", ...;
/// tensors on the CPU), a WrappingOptimizer through what it wraps.
ParameterStates parameter_states(torch::optim::Optimizer& optimizer, const ParameterNumbering& numbering);
void load_parameter_states(torch::optim::Optimizer& optimizer, const ParameterStates& states,
                           const ParameterNumbering& numbering);

/// The first moment `optimizer` keeps for `param`, live (not a copy): SGD's
/// and RMSprop's "momentum_buffer", Adam's and AdamW's "exp_avg" (without
/// bias correction). Undefined before the parameter's first step.
at::Tensor first_moment(torch::optim::Optimizer& optimizer, const at::Tensor& param);
/// "" when `optimizer` keeps a first moment for every group (SGD and RMSprop
/// with momentum > 0, Adam, AdamW), else why not, for an error message.
std::string why_no_first_moment(torch::optim::Optimizer& optimizer);

/// The optimizer in PyTorch's layout, so Python reads it as it reads its own:
///     {"state": {index: {name: value}},
///      "param_groups": [{"params": [index, ...], "lr": ..., <every hyper-parameter>}]}
/// Tensors are references to the live state where it is already on the CPU:
/// write or clone the result before the next step.
StateDict optimizer_state_dict(torch::optim::Optimizer& optimizer);
/// Restores a dict of that layout into an optimizer with the same groups
/// (same parameter indices, same shapes); throws std::invalid_argument
/// naming the first mismatch.
void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state);

}  // namespace basin
