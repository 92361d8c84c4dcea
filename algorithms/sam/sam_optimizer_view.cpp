// The step as its rule sees it (StepView): where each parameter's tensors
// are (what this rank does with it, whether the ascent's gradients are
// whole here, where collectives run) and the step's whole-model arithmetic,
// each reduction among the ranks the rule names; all decided by the
// parameters' placements, never by the mode that placed them.
#include "basin/algorithms/sam/sam_optimizer.h"

#include <ATen/ATen.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/sharding/grad_norm.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

ParameterShare SAMOptimizer::share_of(const at::Tensor& param) const {
  if (shards_ == nullptr) return {};
  return {shards_->placement(param), shards_->owns(param), shards_->counted_here(param), shards_->first_row(param)};
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

std::vector<GroupView> SAMOptimizer::groups_with_grads(bool perturbed_only) {
  return views(perturbed_only, /*with_grads=*/true);
}

std::vector<GroupView> SAMOptimizer::parameter_groups(bool perturbed_only) {
  return views(perturbed_only, /*with_grads=*/false);
}

const c10::TensorImpl* SAMOptimizer::listed_as(const at::Tensor& param) const {
  return shards_ != nullptr ? shards_->stepped(param).unsafeGetTensorImpl() : param.unsafeGetTensorImpl();
}

Ranks SAMOptimizer::ascent_ranks() const { return options_.sync_ascent ? Ranks::kJob : Ranks::kThisRank; }

bool SAMOptimizer::gradients_in_rows() const {
  return some_gradient_in_rows(shards_, unique_parameters(*base_));
}

bool SAMOptimizer::gradients_on_owners() const { return !synced_gradients_whole_; }

bool SAMOptimizer::parameters_have_owners() const { return shards_ != nullptr; }

bool SAMOptimizer::owned_here(const at::Tensor& param) const {
  return shards_ == nullptr || shards_->owns(param);
}

at::Tensor SAMOptimizer::sum(const at::Tensor& partial, Ranks ranks) {
  std::vector<at::Tensor> sums{partial.clone()};
  if (ranks == Ranks::kJob && shards_ != nullptr) shards_->communicator().all_reduce_sum(sums);
  return sums.front();
}

at::Tensor SAMOptimizer::max(const at::Tensor& values, Ranks ranks) {
  std::vector<at::Tensor> maxima{values.clone()};
  if (ranks == Ranks::kJob && shards_ != nullptr) shards_->communicator().all_reduce_max(maxima);
  return maxima.front();
}

at::Tensor SAMOptimizer::gradient_squares(const std::vector<GroupView>& groups, Ranks ranks) {
  std::vector<at::Tensor> grads;
  for (const auto& g : groups) grads.insert(grads.end(), g.grads.begin(), g.grads.end());
  // Gradients synced over the job and whole here add up here alike on every rank.
  if (ranks == Ranks::kThisRank || synced_gradients_whole_) return sum_of_squares(grads);
  return sum_of_squares_over_shards(grads, parameters_of(groups), *shards_);
}

void SAMOptimizer::scale_to_rho(std::vector<Perturbation>& perturbation, const std::vector<GroupView>& groups,
                            const std::vector<at::Tensor>& normed, const std::vector<at::Tensor>& params,
                            Ranks ranks) {
  // Among the job where parameters have owners, each rank norms what it
  // counts and one all-reduce adds them up.
  const bool over_shards = ranks == Ranks::kJob && shards_ != nullptr;
  last_grad_norm_ = over_shards ? global_norm_over_shards(normed, params, *shards_) : global_norm(normed);
  const double norm = last_grad_norm_.item<double>();
  if (norm == 0) return;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (!groups[k].params.empty()) perturbation[k].scale = groups[k].get("rho") / (norm + options_.epsilon);
  }
}

void SAMOptimizer::broadcast_from_owners(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values) {
  if (shards_ != nullptr) shards_->broadcast_from_owners(params, values);
}

torch::optim::Optimizer& SAMOptimizer::stepping_optimizer() {
  ShardedParameters* shards = shards_;
  return shards != nullptr && shards->local_optimizer() != nullptr ? *shards->local_optimizer() : *base_;
}

void SAMOptimizer::step_after_base(std::vector<StepAfterBase> steps) {
  after_base_ = std::move(steps);
  broadcast_after_base_ = true;
}

}  // namespace basin
