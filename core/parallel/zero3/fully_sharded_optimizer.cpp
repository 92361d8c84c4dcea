#include "basin/core/parallel/zero3/fully_sharded_optimizer.h"

#include <ATen/ATen.h>

#include "basin/core/parallel/zero3/fully_sharded_model.h"

namespace basin {

namespace {

std::shared_ptr<torch::optim::Optimizer> local_over_shards(const torch::optim::Optimizer& full,
                                                           const LocalOptimizerFactory& make_local,
                                                           const FullyShardedModel& model) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const auto& group : full.param_groups()) {
    std::vector<at::Tensor> shards;
    for (const auto& p : group.params()) shards.push_back(model.shard_of(p));
    groups.emplace_back(shards, group.options().clone());
  }
  return make_local(std::move(groups));
}

}  // namespace

FullyShardedOptimizer::FullyShardedOptimizer(const torch::optim::Optimizer& full,
                                             const LocalOptimizerFactory& make_local,
                                             std::shared_ptr<FullyShardedModel> model,
                                             std::shared_ptr<Communicator> communicator)
    : FullyShardedOptimizer(local_over_shards(full, make_local, *model), model, std::move(communicator)) {}

FullyShardedOptimizer::FullyShardedOptimizer(std::shared_ptr<torch::optim::Optimizer> local,
                                             std::shared_ptr<FullyShardedModel> model,
                                             std::shared_ptr<Communicator> communicator)
    : Optimizer(GroupSync({}).mirror_groups(*local), GroupSync({}).mirror_defaults(*local)),
      local_(std::move(local)),
      model_(std::move(model)),
      communicator_(std::move(communicator)),
      sync_({}) {
  sync_.start(*this, *local_);
}

at::Tensor FullyShardedOptimizer::step(LossClosure closure) {
  at::Tensor loss = step_shard(closure, [this] { sync_param_groups(); }, *local_);
  model_->shards_stepped();
  return loss;
}

c10::Device FullyShardedOptimizer::device() const { return model_->device(); }

at::Tensor FullyShardedOptimizer::stepped(const at::Tensor& param) const { return model_->shard_of(param); }

int64_t FullyShardedOptimizer::first_row(const at::Tensor& param) const { return model_->first_row(param); }

ParameterStates FullyShardedOptimizer::parameter_states(const ParameterNumbering& numbering) {
  return basin::parameter_states(*local_, numbering);
}

void FullyShardedOptimizer::load_parameter_states(const ParameterStates& states, const ParameterNumbering& numbering) {
  basin::load_parameter_states(*local_, states, numbering);
}

}  // namespace basin
