#include "basin/core/parallel/zero/sharded_optimizer.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/serialize.h>

#include <ATen/ATen.h>

#include "basin/core/communication/byte_collectives.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/communication/flat_tensors.h"
#include "basin/core/parallel/zero/agreed_gradients.h"

namespace basin {

using torch::optim::OptimizerParamGroup;

std::vector<int> ShardedOptimizer::partition(const std::vector<int64_t>& sizes, int world_size) {
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; equal sizes keep their order, so every rank computes the same partition.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
  std::vector<int64_t> load(static_cast<std::size_t>(world_size), 0);
  std::vector<int> owner(sizes.size(), 0);
  for (std::size_t i : order) {
    const int rank = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = rank;
    load[static_cast<std::size_t>(rank)] += sizes[i];
  }
  return owner;
}

namespace {

GroupSync::BaseParams owned_by(const ShardedOptimizer* sharded) {
  return [sharded](const std::vector<at::Tensor>& params) {
    std::vector<at::Tensor> owned;
    for (const auto& p : params) {
      if (sharded->owns(p)) owned.push_back(p);
    }
    return owned;
  };
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(const torch::optim::Optimizer& full, const LocalFactory& make_local,
                                   std::shared_ptr<Communicator> communicator, bool shard_gradients)
    : Optimizer(GroupSync({}).mirror_groups(full), GroupSync({}).mirror_defaults(full)),
      communicator_(std::move(communicator)),
      shard_gradients_(shard_gradients),
      sync_({}, owned_by(this)) {
  std::vector<int64_t> sizes;
  for (const auto& group : full.param_groups()) {
    for (const auto& p : group.params()) {
      params_.push_back(p);
      sizes.push_back(p.numel());
    }
  }
  const auto owner = partition(sizes, communicator_->world_size());
  for (std::size_t i = 0; i < params_.size(); ++i) owners_[params_[i].unsafeGetTensorImpl()] = owner[i];

  std::vector<OptimizerParamGroup> local_groups;
  for (const auto& group : full.param_groups()) {
    std::vector<at::Tensor> owned;
    for (const auto& p : group.params()) {
      if (owns(p)) owned.push_back(p);
    }
    local_groups.emplace_back(owned, group.options().clone());
  }
  local_ = make_local(std::move(local_groups));
  sync_.start(*this, *local_);
}

ParameterPlacement ShardedOptimizer::placement(const at::Tensor& param) const {
  const auto found = owners_.find(param.unsafeGetTensorImpl());
  if (found == owners_.end()) return {};  // not stepped (frozen): whole on every rank, as the model holds it
  const Placement owned = Placement::owned_by(found->second);
  return {Placement::replicated(), shard_gradients_ ? owned : Placement::replicated(), owned};
}

bool ShardedOptimizer::owns(const at::Tensor& param) const { return owner(param) == communicator_->rank(); }

int ShardedOptimizer::owner(const at::Tensor& param) const {
  auto it = owners_.find(param.unsafeGetTensorImpl());
  if (it == owners_.end()) {
    throw std::invalid_argument("ShardedOptimizer: a parameter that was not partitioned (groups cannot be added after sharding)");
  }
  return it->second;
}

int64_t ShardedOptimizer::owned_numel() const {
  int64_t n = 0;
  for (const auto& p : params_) n += owns(p) ? p.numel() : 0;
  return n;
}

void ShardedOptimizer::broadcast_parameters() {
  std::vector<at::Tensor> values;
  for (const auto& p : params_) values.push_back(p.detach());
  broadcast_from_owners(params_, values);
}

void ShardedOptimizer::broadcast_from_owners(const std::vector<at::Tensor>& params,
                                             const std::vector<at::Tensor>& values) {
  if (communicator_->world_size() == 1) return;
  at::NoGradGuard no_grad;
  for (int rank = 0; rank < communicator_->world_size(); ++rank) {
    // Per dtype (a flat buffer has one), each owner's values: one collective each.
    std::map<at::ScalarType, std::vector<at::Tensor>> shard;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (owner(params[i]) == rank) shard[values[i].scalar_type()].push_back(values[i]);
    }
    for (auto& [dtype, tensors] : shard) {
      std::vector<at::Tensor> flat{at::flatten_dense_tensors(tensors)};
      communicator_->broadcast(flat, rank);
      copy_from_flat(flat.front(), tensors);
    }
  }
}

void ShardedOptimizer::reduce_gradients_to_owners() {
  const int world = communicator_->world_size();
  if (world == 1) return;
  const std::vector<at::Tensor> grads = agreed_gradients(params_, *communicator_);
  at::NoGradGuard no_grad;
  // Per dtype, each owner's gradients flattened into its part: one reduce-scatter each.
  std::map<at::ScalarType, std::vector<std::vector<at::Tensor>>> by_dtype;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    auto& owners = by_dtype[grads[i].scalar_type()];
    owners.resize(static_cast<std::size_t>(world));
    owners[static_cast<std::size_t>(owner(params_[i]))].push_back(grads[i]);
  }
  const auto me = static_cast<std::size_t>(communicator_->rank());
  for (auto& [dtype, owners] : by_dtype) {
    std::vector<at::Tensor> parts;
    for (const auto& shard : owners) {
      parts.push_back(shard.empty() ? at::empty({0}, at::TensorOptions(dtype).device(params_.front().device()))
                                    : at::flatten_dense_tensors(shard));
    }
    communicator_->reduce_scatter_sum(parts);
    parts[me].div_(static_cast<double>(world));
    if (!owners[me].empty()) copy_from_flat(parts[me], owners[me]);
  }
}

std::vector<at::Tensor> ShardedOptimizer::shard_of(int rank) const {
  std::vector<at::Tensor> shard;
  for (const auto& p : params_) {
    if (owner(p) == rank) shard.push_back(p);
  }
  return shard;
}

std::vector<std::string> ShardedOptimizer::consolidate_state(int root) {
  std::ostringstream mine;
  torch::save(*local_, mine);
  return gather_bytes(*communicator_, mine.str(), root, device());
}

c10::Device ShardedOptimizer::device() const {
  // Where collectives run: NCCL takes CUDA tensors only.
  return params_.empty() ? c10::Device(c10::kCPU) : params_.front().device();
}

ParameterStates ShardedOptimizer::parameter_states(const ParameterNumbering& numbering) {
  // Each rank's shard, pickled, gathered on rank 0 and merged there.
  const ParameterStates mine = basin::parameter_states(*local_, numbering);
  const std::vector<char> pickled = torch::jit::pickle_save(mine);
  const auto shards = gather_bytes(*communicator_, std::string(pickled.begin(), pickled.end()), 0, device());
  if (communicator_->rank() != 0) return mine;
  ParameterStates all = new_parameter_states();
  for (const auto& shard : shards) {
    const auto states = torch::jit::pickle_load(std::vector<char>(shard.begin(), shard.end())).toGenericDict();
    for (const auto& entry : states) all.insert(entry.key(), entry.value());
  }
  return all;
}

void ShardedOptimizer::load_parameter_states(const ParameterStates& states, const ParameterNumbering& numbering) {
  basin::load_parameter_states(*local_, states, numbering);  // takes the entries of this rank's shard
}

at::Tensor ShardedOptimizer::step(LossClosure closure) {
  at::Tensor loss = step_shard(closure, [this] { sync_param_groups(); }, *local_);
  broadcast_parameters();
  return loss;
}

}  // namespace basin
