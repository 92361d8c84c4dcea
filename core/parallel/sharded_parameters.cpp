#include "basin/core/parallel/sharded_parameters.h"

#include <ATen/ATen.h>

namespace basin {

ShardedParameters* shards_of(torch::optim::Optimizer& optimizer) {
  return dynamic_cast<ShardedParameters*>(&optimizer);
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
