// The rule's verbs: the step's whole-model arithmetic, each reduction among
// the ranks the rule names, and where the parameters' tensors live decided
// by their placements, never by the mode that placed them.
#include "basin/algorithms/sam/step_view.h"

#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/sharding/grad_norm.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

// SAM's own rule, the default every variant overrides: e = rho * g / (||g|| + epsilon),
// the norm among the ranks the ascent was averaged over (the job's, for a rule
// whose e is known on the owners alone).
std::vector<Perturbation> SAMRule::perturbation(StepView& step, std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> normed;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    normed.insert(normed.end(), groups[k].grads.begin(), groups[k].grads.end());
    result[k].directions = groups[k].grads;
  }
  step.scale_to_rho(result, groups, normed, parameters_of(groups), perturbation_ranks(step));
  return result;
}

std::vector<at::Tensor> parameters_of(const std::vector<GroupView>& groups) {
  std::vector<at::Tensor> params;
  for (const auto& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
  return params;
}

int64_t StepView::steps() const { return step_.steps(); }

c10::Device StepView::device() const { return step_.device(); }

std::vector<GroupView> StepView::groups_with_grads(bool perturbed_only) {
  return step_.views(perturbed_only, /*with_grads=*/true);
}

std::vector<GroupView> StepView::parameter_groups(bool perturbed_only) {
  return step_.views(perturbed_only, /*with_grads=*/false);
}

const c10::TensorImpl* StepView::listed_as(const at::Tensor& param) const {
  return step_.shards_ != nullptr ? step_.shards_->stepped(param).unsafeGetTensorImpl() : param.unsafeGetTensorImpl();
}

Ranks StepView::ascent_ranks() const { return step_.options_.sync_ascent ? Ranks::kJob : Ranks::kThisRank; }

bool StepView::ascent_sharded() const { return step_.ascent_sharded(); }

bool StepView::gradients_in_rows() const {
  return some_gradient_in_rows(step_.shards_, unique_parameters(*step_.base_));
}

bool StepView::gradients_on_owners() const { return !step_.synced_gradients_whole_; }

bool StepView::parameters_have_owners() const { return step_.shards_ != nullptr; }

bool StepView::owned_here(const at::Tensor& param) const {
  return step_.shards_ == nullptr || step_.shards_->owns(param);
}

at::Tensor StepView::sum(const at::Tensor& partial, Ranks ranks) {
  std::vector<at::Tensor> sums{partial.clone()};
  if (ranks == Ranks::kJob && step_.shards_ != nullptr) step_.shards_->communicator().all_reduce_sum(sums);
  return sums.front();
}

at::Tensor StepView::max(const at::Tensor& values, Ranks ranks) {
  std::vector<at::Tensor> maxima{values.clone()};
  if (ranks == Ranks::kJob && step_.shards_ != nullptr) step_.shards_->communicator().all_reduce_max(maxima);
  return maxima.front();
}

at::Tensor StepView::gradient_squares(const std::vector<GroupView>& groups, Ranks ranks) {
  std::vector<at::Tensor> grads;
  for (const auto& g : groups) grads.insert(grads.end(), g.grads.begin(), g.grads.end());
  // Gradients synced over the job and whole here add up here alike on every rank.
  if (ranks == Ranks::kThisRank || step_.synced_gradients_whole_) return sum_of_squares(grads);
  return sum_of_squares_over_shards(grads, parameters_of(groups), *step_.shards_);
}

void StepView::scale_to_rho(std::vector<Perturbation>& perturbation, const std::vector<GroupView>& groups,
                            const std::vector<at::Tensor>& normed, const std::vector<at::Tensor>& params,
                            Ranks ranks) {
  // Among the job where parameters have owners, each rank norms what it
  // counts and one all-reduce adds them up.
  const bool over_shards = ranks == Ranks::kJob && step_.shards_ != nullptr;
  step_.last_grad_norm_ = over_shards ? global_norm_over_shards(normed, params, *step_.shards_) : global_norm(normed);
  const double norm = step_.last_grad_norm_.item<double>();
  if (norm == 0) return;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (!groups[k].params.empty()) perturbation[k].scale = groups[k].get("rho") / (norm + step_.options_.epsilon);
  }
}

void StepView::broadcast_from_owners(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values) {
  if (step_.shards_ != nullptr) step_.shards_->broadcast_from_owners(params, values);
}

torch::optim::Optimizer& StepView::stepping_optimizer() {
  ShardedParameters* shards = step_.shards_;
  return shards != nullptr && shards->local_optimizer() != nullptr ? *shards->local_optimizer() : *step_.base_;
}

at::Tensor StepView::forward_at_current_weights(const std::function<at::Tensor()>& closure) {
  return step_.forward_at_current_weights(closure);
}

void StepView::add_pass_hooks(PassHooks hooks) { step_.add_pass_hooks(std::move(hooks)); }

void StepView::step_after_base(std::vector<StepAfterBase> steps) {
  step_.after_base_ = std::move(steps);
  step_.broadcast_after_base_ = true;
}

}  // namespace basin
