#include "basin/core/sharding/sharded_parameters.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "basin/core/communication/communicator.h"

namespace basin {

ShardedParameters* shards_of(torch::optim::Optimizer& optimizer) {
  return dynamic_cast<ShardedParameters*>(&optimizer);
}

bool ShardedParameters::counted_here(const at::Tensor& param) {
  const Placement state = placement(param).optimizer_state;
  if (state.in_rows()) return true;
  return (state.owned() ? state.owner : 0) == communicator().rank();
}

namespace {

/// Whether any of `params` has a placement `test` accepts; false without
/// `shards` (every tensor replicated).
bool any_placed(const ShardedParameters* shards, const std::vector<at::Tensor>& params,
                const std::function<bool(const ParameterPlacement&)>& test) {
  if (shards == nullptr) return false;
  return std::any_of(params.begin(), params.end(), [&](const at::Tensor& p) { return test(shards->placement(p)); });
}

}  // namespace

bool some_gradient_in_rows(const ShardedParameters* shards, const std::vector<at::Tensor>& params) {
  return any_placed(shards, params, [](const ParameterPlacement& placed) { return placed.gradient.in_rows(); });
}

bool some_gradient_not_whole(const ShardedParameters* shards, const std::vector<at::Tensor>& params) {
  return any_placed(shards, params,
                    [](const ParameterPlacement& placed) { return !placed.gradient.replicated_everywhere(); });
}

bool holds_rows_of(const ShardedParameters* shards, torch::nn::Module& model) {
  return any_placed(shards, model.parameters(/*recurse=*/true),
                    [](const ParameterPlacement& placed) { return placed.parameter.in_rows(); });
}

at::Tensor step_shard(const torch::optim::Optimizer::LossClosure& closure, const std::function<void()>& sync_groups,
                      torch::optim::Optimizer& local) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  sync_groups();
  local.step();
  return loss;
}

}  // namespace basin
