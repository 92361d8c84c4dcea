#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include <torch/optim/optimizer.h>

#include "basin/core/optim/group_sync.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

class Communicator;

/// ZeRO-1: optimizer state sharded across ranks (ZeRO-2: gradients too).
///
/// Parameters are partitioned greedily by size (largest first, to the rank
/// holding least so far; a tensor is never split). Each rank's local base
/// optimizer holds state for its own shard only; after it steps, each shard
/// is broadcast from its owner. The wrapper's param groups mirror the full
/// model's and stay one source of truth with the local optimizer's
/// (GroupSync), so schedulers reach every rank's local optimizer.
///
/// Each rank needs the average over ranks of the gradients it owns before
/// `step`: `reduce_gradients_to_owners` sums each owner's gradients onto it
/// alone (a reduce-scatter of uneven parts, by tensor), and `step` ends with
/// each owner's broadcast of its updated shard (an all-gather): together the
/// bytes of one all-reduce, what data-parallel SGD moves. An all-reduce of
/// every gradient (the data-parallel sync) serves too.
class ShardedOptimizer : public torch::optim::Optimizer, public ShardedParameters, public WrappingOptimizer {
 public:
  /// Builds the base optimizer over this rank's shard of each group (groups
  /// carry their options; a group may be empty on a rank).
  using LocalFactory = LocalOptimizerFactory;

  /// `full` is the optimizer the config built over all parameters; only its
  /// groups and options are used.
  /// `shard_gradients`: ZeRO-2, whose gradients the trainer reduce-scatters
  /// to their owners as backward produces them (BucketReducer with owners).
  ShardedOptimizer(const torch::optim::Optimizer& full, const LocalFactory& make_local,
                   std::shared_ptr<Communicator> communicator, bool shard_gradients = false);

  /// Runs the closure (if any), steps this rank's shard, broadcasts shards.
  at::Tensor step(LossClosure closure = nullptr) override;

  /// Replaces each gradient this rank owns by its mean over ranks, from one
  /// reduce-scatter of the owners' shards, flattened; the gradients other
  /// ranks own stay rank-local. A parameter without a gradient here counts as zero
  /// when another rank has one (agreed_gradients).
  void reduce_gradients_to_owners();

  /// Each parameter whole on every rank, its optimizer state on its owner's
  /// (ZeRO-2: its synced gradient too).
  ParameterPlacement placement(const at::Tensor& param) const override;
  bool owns(const at::Tensor& param) const override;
  int64_t first_row(const at::Tensor& /*param*/) const override { return 0; }  // every parameter whole
  int owner(const at::Tensor& param) const;
  void broadcast_parameters() override;
  void broadcast_from_owners(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values) override;
  Communicator& communicator() override { return *communicator_; }
  c10::Device device() const override;

  torch::optim::Optimizer& local() { return *local_; }
  torch::optim::Optimizer* local_optimizer() override { return local_.get(); }
  /// Copies hyper-parameters changed on the wrapper or the local optimizer to the other.
  void sync_param_groups() override { sync_.sync(*this, *local_); }

  /// Collective: rank 0 gets every shard's state, the others their own.
  ParameterStates parameter_states(const ParameterNumbering& numbering) override;
  /// Takes the entries of the parameters this rank owns, whatever world
  /// size saved them (the state is keyed by parameter, not by rank).
  void load_parameter_states(const ParameterStates& states, const ParameterNumbering& numbering) override;
  /// Number of elements this rank owns.
  int64_t owned_numel() const;

  /// Every rank's local optimizer state (torch::save archives, indexed by
  /// rank) gathered on `root`, for a checkpoint; other ranks get an empty
  /// vector. Each archive loads into an optimizer over that rank's shard.
  std::vector<std::string> consolidate_state(int root);
  /// The parameters `rank` owns, in group order.
  std::vector<at::Tensor> shard_of(int rank) const;

  /// Owner rank of each size, greedy: largest first, to the least-loaded rank.
  static std::vector<int> partition(const std::vector<int64_t>& sizes, int world_size);

 private:
  std::shared_ptr<Communicator> communicator_;
  bool shard_gradients_;
  std::vector<at::Tensor> params_;  // every parameter once, in group order
  std::unordered_map<const c10::TensorImpl*, int> owners_;
  std::shared_ptr<torch::optim::Optimizer> local_;
  GroupSync sync_;
};

}  // namespace basin
