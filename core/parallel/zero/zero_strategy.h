#pragma once

#include <memory>
#include <vector>

#include "basin/core/parallel/ddp/data_parallel_strategy.h"

namespace basin {

class ShardedOptimizer;

/// "zero1" and "zero2": data parallel, with the optimizer's state sharded
/// across ranks (ShardedOptimizer), and under zero2 the gradients too.
/// zero1's syncs that need gradients only where they are stepped reduce
/// them to their owners once backward has ended; every other sync is the
/// buckets' all-reduce. zero2's buckets reduce-scatter to the owners,
/// during backward.
class ZeroStrategy : public DataParallelStrategy {
 public:
  ZeroStrategy(std::shared_ptr<Communicator> communicator, Options options, bool shard_gradients);

  void wrap(State& state, const std::vector<torch::nn::Module*>& units,
            const LocalOptimizerFactory& make_local) override;
  ShardedParameters* shards() override;

 protected:
  std::vector<int> owners(const std::vector<at::Tensor>& params) const override;
  bool reduces_to_owners_after_backward(GradientSync sync) const override;
  void reduce_to_owners() override;

 private:
  bool shard_gradients_;
  ShardedOptimizer* sharded_ = nullptr;  // held by the state's optimizer chain
};

}  // namespace basin
