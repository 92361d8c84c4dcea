#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include "basin/core/sharding/placement.h"

namespace torch::nn { class Module; }

namespace basin {

class Communicator;

/// Builds the base optimizer over this rank's parameter groups (the
/// config's optimizer, by name, over a shard's groups): what a sharding
/// mode steps locally.
using LocalOptimizerFactory =
    std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

/// Parameters partitioned across ranks, each one updated by its owner.
/// Rules ask it where each parameter's tensors live (placement), never
/// which mode made it; SAM asks which parameters this rank must back up
/// and restore.
class ShardedParameters {
 public:
  virtual ~ShardedParameters() = default;
  /// Where `param`'s tensors live: `param` is a model's parameter or the
  /// tensor stepped for it (stepped()); one the optimizer does not step (a
  /// frozen parameter) is whole on every rank. The same on every rank:
  /// whether a collective runs is decided by placements.
  virtual ParameterPlacement placement(const at::Tensor& param) const = 0;
  /// Whether this rank steps `param` (all of it, or its rows of it).
  virtual bool owns(const at::Tensor& param) const = 0;
  /// Whether this rank adds `param`'s values (its gradient, its state, what
  /// a rule computes from them) into a sum over the whole model that one
  /// all-reduce completes, as its optimizer state is placed: each rank its
  /// rows, the owner what one rank owns, and rank 0 alone what every rank
  /// steps (once, not once a rank).
  bool counted_here(const at::Tensor& param);
  /// The first of the parameter's rows (along dim 0) that `param` (a model's
  /// parameter or the tensor stepped for it) holds here: 0 but for this
  /// rank's rows of a parameter in rows. What a rule that draws noise row by row seeds each row by
  /// (RWP), so that every way of sharding draws what one process draws.
  virtual int64_t first_row(const at::Tensor& param) const = 0;
  /// Copies every parameter from its owner to all ranks.
  virtual void broadcast_parameters() = 0;
  /// Copies each of `values` (one per tensor of `params`, any shape, the
  /// same on every rank) from the rank that owns its parameter to all
  /// ranks: what an owner computed for its shard (LookSAM's g_v), whole on
  /// every rank. Collective.
  virtual void broadcast_from_owners(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values) = 0;
  virtual Communicator& communicator() = 0;
  /// Where collectives over the shards run (NCCL takes CUDA tensors only),
  /// whatever this rank holds.
  virtual c10::Device device() const { return c10::Device(c10::kCPU); }
  /// The tensor the optimizer steps for the model's parameter `param`:
  /// itself, or this rank's rows of it where the parameter is in rows.
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

/// Whether some synced gradient of `params` is in rows (zero3): no rank
/// ever holds it whole.
bool some_gradient_in_rows(const ShardedParameters* shards, const std::vector<at::Tensor>& params);

/// Whether some synced gradient of `params` is not whole on every rank (on
/// an owner, or in rows): what is read from it is read where it is.
bool some_gradient_not_whole(const ShardedParameters* shards, const std::vector<at::Tensor>& params);

/// Whether this rank holds only its rows of some of `model`'s parameters
/// (zero3): they hold no bytes between units, and a checkpoint is each
/// rank's own file.
bool holds_rows_of(const ShardedParameters* shards, torch::nn::Module& model);

/// The step of an optimizer over shards: the closure's passes (with
/// autograd on), then `sync_groups` (the wrapper's hyper-parameters into
/// `local`), then `local`'s step over this rank's shard. Returns the
/// closure's loss (undefined without a closure).
at::Tensor step_shard(const torch::optim::Optimizer::LossClosure& closure, const std::function<void()>& sync_groups,
                      torch::optim::Optimizer& local);

}  // namespace basin
