#include "basin/core/parallel/zero/zero_strategy.h"

#include <utility>

#include "basin/core/parallel/zero/sharded_optimizer.h"

namespace basin {

ZeroStrategy::ZeroStrategy(std::shared_ptr<Communicator> communicator, Options options, bool shard_gradients)
    : DataParallelStrategy(std::move(communicator), options, shard_gradients ? "zero2" : "zero1"),
      shard_gradients_(shard_gradients) {}

void ZeroStrategy::wrap(State& state, const std::vector<torch::nn::Module*>& units,
                        const LocalOptimizerFactory& make_local) {
  DataParallelStrategy::wrap(state, units, make_local);
  auto sharded = std::make_shared<ShardedOptimizer>(*state.optimizer, make_local, communicator(), shard_gradients_);
  sharded_ = sharded.get();
  state.optimizer = std::move(sharded);
}

ShardedParameters* ZeroStrategy::shards() { return sharded_; }

std::vector<int> ZeroStrategy::owners(const std::vector<at::Tensor>& params) const {
  std::vector<int> out;
  if (!shard_gradients_) return out;
  for (const auto& p : params) out.push_back(sharded_->owner(p));
  return out;
}

bool ZeroStrategy::reduces_to_owners_after_backward(GradientSync sync) const {
  return sync == GradientSync::kWhereStepped && !shard_gradients_;
}

void ZeroStrategy::reduce_to_owners() { sharded_->reduce_gradients_to_owners(); }

}  // namespace basin
