#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/parallel/zero3/fully_sharded_options.h"

namespace basin {

class DataParallel;
class FullyShardedModel;
class FullyShardedOptimizer;

/// "zero3": each rank keeps its rows of every parameter (FullyShardedModel);
/// the model's own parameters hold bytes only while their unit runs, every
/// microbatch's gradients go to the shards, unit by unit, and the optimizer
/// steps the shards (FullyShardedOptimizer). Its checkpoint is one file per
/// rank, with this rank's shards. A mixed-precision policy gathers the
/// units in its param_dtype (and, when it says so, keeps the floating
/// buffers in it).
class Zero3Strategy : public DistributedStrategy {
 public:
  Zero3Strategy(std::shared_ptr<Communicator> communicator, FullyShardedOptions options);
  ~Zero3Strategy() override;

  void wrap(State& state, const std::vector<torch::nn::Module*>& units,
            const LocalOptimizerFactory& make_local) override;
  UnitRunner* unit_runner() override;
  ShardedParameters* shards() override;

  void prepare_gradient_sync(GradientSync sync) override;
  void finish_gradient_sync(GradientSync sync) override;
  void abandon_gradient_sync() override;
  bool syncs_every_microbatch() const override { return true; }
  void after_step() override;

  std::vector<Engine::CheckpointPart> checkpoint_parts() override;
  void check_resume(int64_t saved_world_size) const override;
  std::optional<RowsLayout> rows_layout() const override;
  void with_whole_parameters(const std::function<void()>& body) override;
  std::vector<at::Tensor> whole_parameters() override;

 protected:
  /// Mode `mode` over the job's ranks (`job`: the data, the replicas'
  /// weights and buffers), sharded within `shards`, a group of them; the
  /// gradients are also summed over `replicas`, the ranks that hold the same
  /// rows in the other groups (HSDP; null: zero3's one group).
  Zero3Strategy(std::string mode, std::shared_ptr<Communicator> job, std::shared_ptr<Communicator> shards,
                std::shared_ptr<Communicator> replicas, FullyShardedOptions options);

 private:
  /// This rank's rows of every parameter, by the model's names (the "shards" part).
  c10::IValue shards_state() const;
  void load_shards_state(const c10::IValue& saved);

  /// Under a policy: the floating buffers take its param_dtype, or stay as
  /// they are where it says so; a model with some must say which.
  void lower_buffers(torch::nn::Module& model) const;

  FullyShardedOptions options_;
  std::shared_ptr<Communicator> shard_group_;
  std::shared_ptr<Communicator> replica_group_;  // HSDP's; null under zero3
  std::unique_ptr<DataParallel> replicas_;
  std::shared_ptr<FullyShardedModel> model_;
  FullyShardedOptimizer* optimizer_ = nullptr;  // held by the state's optimizer chain
};

}  // namespace basin
