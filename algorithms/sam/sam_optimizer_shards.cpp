// The step's whole-model arithmetic when the base steps shards (zero1,
// zero2, zero3): which parameters this rank perturbs, sums over ranks, the
// gradient's norm over the shards, and where their collectives run, each
// decided by where the parameters' tensors are placed, never by the mode.
#include "basin/algorithms/sam/sam_optimizer.h"

#include <ATen/ATen.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/sharding/grad_norm.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

ParameterShare SAMOptimizer::share_of(const at::Tensor& param) const {
  if (shards_ == nullptr) return {};
  return {shards_->placement(param), shards_->owns(param), shards_->counted_here(param), shards_->first_row(param)};
}

at::Tensor SAMOptimizer::sum_over_shards(const at::Tensor& partial) {
  if (shards_ == nullptr) return partial;
  std::vector<at::Tensor> sums{partial.clone()};
  shards_->communicator().all_reduce_sum(sums);
  return sums.front();
}

bool SAMOptimizer::ascent_sharded() const {
  return !synced_gradients_whole_ && options_.sync_ascent && rule_->ascent_pass();
}

c10::Device SAMOptimizer::device() const {
  if (shards_ != nullptr) return shards_->device();
  for (const auto& group : param_groups_) {
    if (!group.params().empty()) return group.params().front().device();
  }
  return c10::Device(c10::kCPU);
}

at::Tensor SAMOptimizer::gradient_squares(const std::vector<GroupView>& groups) {
  std::vector<at::Tensor> grads;
  for (const auto& g : groups) grads.insert(grads.end(), g.grads.begin(), g.grads.end());
  if (!ascent_sharded()) return sum_of_squares(grads);
  return sum_of_squares_over_shards(grads, parameters_of(groups), *shards_);
}

void SAMOptimizer::scale_to_rho(std::vector<Perturbation>& perturbation, const std::vector<GroupView>& groups,
                                const std::vector<at::Tensor>& normed, const std::vector<at::Tensor>& params) {
  // Averaged gradients are the same on every rank: under ZeRO-1 each rank
  // norms its own shard and one all-reduce adds them up.
  const bool over_shards = shards_ != nullptr && (options_.sync_ascent || rule_->perturbs_on_owners());
  last_grad_norm_ = over_shards ? global_norm_over_shards(normed, params, *shards_) : global_norm(normed);
  const double norm = last_grad_norm_.item<double>();
  if (norm == 0) return;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (!groups[k].params.empty()) perturbation[k].scale = groups[k].get("rho") / (norm + options_.epsilon);
  }
}

}  // namespace basin
