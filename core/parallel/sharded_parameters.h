#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

namespace basin {

class Communicator;

/// Builds the base optimizer over this rank's parameter groups (the
/// config's optimizer, by name, over a shard's groups): what a sharding
/// mode steps locally.
using LocalOptimizerFactory =
    std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

/// Parameters partitioned across ranks, each one updated by its owner.
/// SAM asks it which parameters this rank must back up and restore.
class ShardedParameters {
 public:
  virtual ~ShardedParameters() = default;
  virtual bool owns(const at::Tensor& param) const = 0;
  /// Copies every parameter from its owner to all ranks.
  virtual void broadcast_parameters() = 0;
  /// Copies each of `values` (one per tensor of `params`, any shape, the
  /// same on every rank) from the rank that owns its parameter to all
  /// ranks: what an owner computed for its shard (LookSAM's g_v), whole on
  /// every rank. Collective.
  virtual void broadcast_from_owners(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values) = 0;
  virtual Communicator& communicator() = 0;
  /// ZeRO-2: after a synced backward a rank holds the gradients it owns
  /// only, so whatever reads gradients does so on owners (SAM's ascent
  /// among them) and gathers the result.
  virtual bool gradients_sharded() const { return false; }
  /// Where collectives over the shards run (NCCL takes CUDA tensors only),
  /// whatever this rank holds.
  virtual c10::Device device() const { return c10::Device(c10::kCPU); }
  /// ZeRO-3: the optimizer steps each rank's shard of every parameter, not
  /// the model's parameters (which hold bytes only while their unit runs).
  virtual bool parameters_sharded() const { return false; }
  /// The tensor the optimizer steps for the model's parameter `param`:
  /// itself, or under ZeRO-3 this rank's shard of it.
  virtual at::Tensor stepped(const at::Tensor& param) const { return param; }
  /// The base optimizer that steps this rank's shard and keeps its state
  /// (the config's optimizer, over the shard's groups); null when the
  /// shards have none of their own.
  virtual torch::optim::Optimizer* local_optimizer() { return nullptr; }
};

/// `optimizer` itself when it steps shards of the parameters (a zero
/// optimizer built by hand, outside the trainer, whose strategy hands its
/// shards to rules in State::shards); null otherwise.
ShardedParameters* shards_of(torch::optim::Optimizer& optimizer);

/// The step of an optimizer over shards: the closure's passes (with
/// autograd on), then `sync_groups` (the wrapper's hyper-parameters into
/// `local`), then `local`'s step over this rank's shard. Returns the
/// closure's loss (undefined without a closure).
at::Tensor step_shard(const torch::optim::Optimizer::LossClosure& closure, const std::function<void()>& sync_groups,
                      torch::optim::Optimizer& local);

}  // namespace basin
