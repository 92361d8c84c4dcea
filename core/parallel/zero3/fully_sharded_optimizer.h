#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

#include "basin/core/optim/group_sync.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

class FullyShardedModel;

/// ZeRO-3's optimizer: the config's optimizer over this rank's shards
/// (FullyShardedModel), group for group, each parameter replaced by its
/// shard. Every rank owns a shard of every parameter, so to SAM and the
/// step checks it is a ShardedParameters whose gradients are sharded and
/// whose parameters need no broadcast: the next forward gathers them.
class FullyShardedOptimizer : public torch::optim::Optimizer, public ShardedParameters, public WrappingOptimizer {
 public:
  /// `full` is the optimizer the config built over the model's parameters;
  /// only its groups and options are used. `make_local` builds the base
  /// over the shards' groups.
  FullyShardedOptimizer(const torch::optim::Optimizer& full, const LocalOptimizerFactory& make_local,
                        std::shared_ptr<FullyShardedModel> model, std::shared_ptr<Communicator> communicator);

  /// Runs the closure (if any), then steps the shards.
  at::Tensor step(LossClosure closure = nullptr) override;

  /// Every tensor of every parameter in rows, each rank holding its own.
  ParameterPlacement placement(const at::Tensor& /*param*/) const override {
    return {Placement::rows(), Placement::rows(), Placement::rows()};
  }
  bool owns(const at::Tensor& /*shard*/) const override { return true; }
  void broadcast_parameters() override {}  // each unit's next forward gathers its shards
  void broadcast_from_owners(const std::vector<at::Tensor>& /*params*/,
                             const std::vector<at::Tensor>& /*values*/) override {}  // a shard's values are its own
  Communicator& communicator() override { return *communicator_; }
  c10::Device device() const override;
  at::Tensor stepped(const at::Tensor& param) const override;
  int64_t first_row(const at::Tensor& param) const override;

  torch::optim::Optimizer& local() { return *local_; }
  torch::optim::Optimizer* local_optimizer() override { return local_.get(); }
  FullyShardedModel& model() { return *model_; }
  void sync_param_groups() override { sync_.sync(*this, *local_); }
  /// This rank's shards' state (each rank saves its own).
  ParameterStates parameter_states(const ParameterNumbering& numbering) override;
  void load_parameter_states(const ParameterStates& states, const ParameterNumbering& numbering) override;

 private:
  FullyShardedOptimizer(std::shared_ptr<torch::optim::Optimizer> local, std::shared_ptr<FullyShardedModel> model,
                        std::shared_ptr<Communicator> communicator);

  std::shared_ptr<torch::optim::Optimizer> local_;
  std::shared_ptr<FullyShardedModel> model_;
  std::shared_ptr<Communicator> communicator_;
  GroupSync sync_;
};

}  // namespace basin
