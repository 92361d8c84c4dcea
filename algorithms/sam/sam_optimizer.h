#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/optim/optimizer.h>

#include "basin/algorithms/sam/parameter_swap.h"
#include "basin/algorithms/sam/pass_plan.h"
#include "basin/algorithms/sam/sam_rule.h"
#include "basin/algorithms/sam/step_view.h"
#include "basin/core/engine/pass_hooks.h"
#include "basin/core/engine/pass_request.h"
#include "basin/core/engine/state.h"
#include "basin/core/optim/group_sync.h"
#include "basin/core/optim/optimizer_state.h"

namespace basin {

class ShardedParameters;

/// Settings of the SAM step. Per-group values ("rho", "eta") live in the
/// wrapper's param groups, so schedulers can drive them; these are defaults.
struct SAMOptions {
  double rho = 0.05;       // radius of the ascent step
  double epsilon = 1e-12;  // added to the gradient norm
  double eta = 0.01;       // a per-group value rules read (ASAM's T = |w| + eta, Fisher SAM's weight)
  int64_t interval = 1;    // SAM step every `interval` steps, plain steps between
  /// Late-phase SAM: plain steps before this step (counting every step).
  int64_t start = 0;
  /// Whether the ascent gradients are averaged over ranks. Only then may the
  /// norm be taken over shards (rank-local ascent needs each rank's own norm).
  bool sync_ascent = false;
  /// mSAM: the batch is split into this many parts, each perturbed from its
  /// own gradient; the descent gradients are averaged over the parts.
  int64_t parts = 1;
};

/// Sharpness-Aware Minimization around any LibTorch optimizer: the one SAM
/// step of the whole family, a variant being a SAMRule (and maybe a PassPlan)
/// that sees the step through its StepView (view()).
///
/// `step(closure)`:
///   ascent    closure at w: gradients g (the pass syncs them over ranks or
///             not, as `sync_ascent` says: see request().sync)
///   perturb   e(w) from the rule (SAM: rho * g / (||g|| + epsilon), ||g||
///             in fp32), w + e by storage swap (ParameterSwap)
///   descent   closure at w + e: gradients g(w + e)
///   restore   each parameter takes its own storage back: w, bit-exact
///   step      the rule adjusts the descent gradients; the base optimizer
///             steps at w with them
/// Plain steps before `start` and between SAM steps (`interval`); with
/// `parts` > 1 (mSAM) ascent, perturb, descent and restore run once per
/// part of the batch (the closure reads `part()`), the base stepping with
/// the mean of the parts' descent gradients and the step returning the mean
/// of their losses. A skipped pass (gradients_finite false) zeroes gradients
/// and restores w. `step()` without a closure is one plain base step. Like
/// any closure given to a LibTorch optimizer, the closure zeroes the
/// gradients first.
///
/// Hyper-parameters are one source of truth with the base (GroupSync):
/// schedulers and users may set them on either optimizer. Made by name for
/// any variant with make_sam_optimizer (sam_family.h).
class SAMOptimizer : public torch::optim::Optimizer,
                     public PassAwareOptimizer,
                     public WrappingOptimizer,
                     private StepView {
 public:
  /// `rule` null: SAM's. A rule that is also a PassPlan plans the passes.
  /// `shards`: the base's, when it steps shards of the parameters (zero1,
  /// zero2, zero3: State::shards); SAM then norms, perturbs and restores
  /// through them. Null: the base's own when it is a zero optimizer built
  /// by hand (shards_of), else none.
  SAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options = {},
               std::shared_ptr<SAMRule> rule = nullptr, ShardedParameters* shards = nullptr);

  at::Tensor step(LossClosure closure = nullptr) override;

  torch::optim::Optimizer& base() { return *base_; }
  const SAMOptions& options() const { return options_; }
  SAMRule& rule() { return *rule_; }
  PassPlan* pass_plan() { return plan_; }
  void add_pass_hooks(PassHooks hooks) override { hooks_.push_back(std::move(hooks)); }

  /// Copies hyper-parameters and groups changed on either side to the other.
  void sync_param_groups() override;

  /// SAM keeps no per-parameter state between steps: the base's is the
  /// state (a rule's own travels with its algorithm, SAM::state_dict).
  ParameterStates parameter_states(const ParameterNumbering& numbering) override;
  void load_parameter_states(const ParameterStates& states, const ParameterNumbering& numbering) override;
  /// The counters (steps, SAM steps, skipped steps) for a checkpoint; the
  /// interval's phase follows from `steps`.
  StateDict counters() const;
  void load_counters(const StateDict& counters);
  /// Saves the base optimizer (its own archive), the wrapper's counters and
  /// every group's hyper-parameters, which LibTorch's archive drops.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  /// Parameters SAM leaves at w: not perturbed and not in the norm (SAM-ON
  /// perturbs the normalization layers alone). Their descent gradients are
  /// taken at the perturbed point of the others all the same.
  void set_unperturbed(std::unordered_set<const c10::TensorImpl*> params) { unperturbed_ = std::move(params); }
  bool perturbs(const at::Tensor& param) const {
    return unperturbed_.count(param.unsafeGetTensorImpl()) == 0 && resting_.count(param.unsafeGetTensorImpl()) == 0;
  }

  /// The pass the closure is running now (kPlain between steps).
  Pass pass() const { return pass_; }
  /// What the closure runs on, returns and syncs in this pass (see
  /// PassRequest): the whole batch, its mean loss and the gradients
  /// averaged where they are stepped, but where the step asks otherwise
  /// (a rank-local ascent, mSAM's parts, ESAM's forward alone and samples).
  const PassRequest& request() const { return request_; }
  /// The part of the batch the closure runs on (mSAM), of `parts()`: 0 of 1
  /// for SAM, and for the plain steps between SAM steps (`interval`), which
  /// take the whole batch.
  int64_t part() const { return request_.part; }
  int64_t parts() const { return request_.parts; }
  int64_t steps() const override { return steps_; }  // step(closure) calls
  /// Of which took the descent pass (two passes or more), or for one-pass
  /// rules ran their pass at a perturbed point.
  int64_t sam_steps() const { return sam_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  /// fp32 norm the last perturbation was scaled by (of the gradient, of
  /// T g for ASAM, of the momentum for momentum_sam).
  const at::Tensor& last_grad_norm() const { return last_grad_norm_; }
  /// The buffers that hold w + e during the descent, one per parameter with
  /// a gradient that this rank owns: the one extra copy of the parameters
  /// (of this rank's shard under ZeRO-1) SAM keeps.
  const std::vector<at::Tensor>& perturbed_buffers() const { return swap_.buffers(); }

  /// What the rule sees of this step (its hooks receive it).
  StepView& view() { return *this; }
  /// Whether the step norms, perturbs and restores through `shards` (the
  /// base's, when it steps shards of the parameters).
  bool steps_through(const ShardedParameters* shards) const { return shards_ == shards; }

  /// The config key of the algorithm that made this step ("algorithms.gsam"); "" when made by hand. A second
  /// SAM-family algorithm names it when it refuses to wrap this step again.
  const std::string& made_by() const { return made_by_; }
  void set_made_by(std::string key) { made_by_ = std::move(key); }

 private:
  // What the rule sees (StepView, sam_optimizer_view.cpp).
  c10::Device device() const override;
  std::vector<GroupView> groups_with_grads(bool perturbed_only) override;
  std::vector<GroupView> parameter_groups(bool perturbed_only) override;
  const c10::TensorImpl* listed_as(const at::Tensor& param) const override;
  Ranks ascent_ranks() const override;
  bool ascent_sharded() const override;
  bool gradients_in_rows() const override;
  bool gradients_on_owners() const override;
  bool parameters_have_owners() const override;
  bool owned_here(const at::Tensor& param) const override;
  at::Tensor sum(const at::Tensor& partial, Ranks ranks) override;
  at::Tensor max(const at::Tensor& values, Ranks ranks) override;
  at::Tensor gradient_squares(const std::vector<GroupView>& groups, Ranks ranks) override;
  void scale_to_rho(std::vector<Perturbation>& perturbation, const std::vector<GroupView>& groups,
                    const std::vector<at::Tensor>& normed, const std::vector<at::Tensor>& params, Ranks ranks) override;
  void broadcast_from_owners(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values) override;
  torch::optim::Optimizer& stepping_optimizer() override;
  at::Tensor forward_at_current_weights(const LossClosure& closure) override;
  void step_after_base(std::vector<StepAfterBase> steps) override;

  std::vector<GroupView> views(bool perturbed_only, bool with_grads);
  at::Tensor run_pass(Pass pass, const LossClosure& closure, PassRequest request = {});
  bool gradients_finite(Pass pass);
  /// w <- w + e: owned parameters by storage swap, the others in place (or
  /// from their owners, for a rule that perturbs on owners).
  void move_to_perturbed(const std::vector<GroupView>& groups, const std::vector<Perturbation>& perturbation);
  /// Where `param` is placed, and what this rank does with it (a view's share).
  ParameterShare share_of(const at::Tensor& param) const;
  void base_step();
  void skip_step();
  at::Tensor plain_step(const LossClosure& closure);
  at::Tensor one_pass_step(const LossClosure& closure);
  /// Ascent, perturbation, descent and restore on part `part_` of the batch;
  /// adds its loss to `loss`. False when a pass overflowed (w is restored).
  bool sam_part(const LossClosure& closure, at::Tensor& loss, bool& descended);
  /// The ascent pass with the plan's resting tensors out of autograd; sets
  /// `all_resting` when the plan rests every tensor the loss reaches.
  at::Tensor ascent(const LossClosure& closure, at::Tensor& sample_losses, bool& all_resting);
  void add_to_descent_sum();
  void take_descent_mean();
  /// Swaps w back. Parameters this rank does not own (ZeRO-1) were perturbed
  /// in place; their owners' broadcast restores them, in the base step or,
  /// when no base step follows, here.
  void restore_weights(bool base_step_follows, bool collectives_allowed = true);

  std::shared_ptr<torch::optim::Optimizer> base_;
  SAMOptions options_;
  std::shared_ptr<SAMRule> rule_;
  PassPlan* plan_ = nullptr;
  bool ascent_is_the_step_ = false;  // this ascent's gradients step the base (every chosen tensor rests)
  ShardedParameters* shards_ = nullptr;
  bool synced_gradients_whole_ = true;  // no parameter's synced gradient is on an owner or in rows
  GroupSync sync_;
  std::vector<PassHooks> hooks_;
  Pass pass_ = Pass::kPlain;
  int64_t steps_ = 0;
  int64_t sam_steps_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t part_ = 0;
  PassRequest request_;
  std::unordered_set<const c10::TensorImpl*> unperturbed_;
  std::unordered_set<const c10::TensorImpl*> resting_;
  at::Tensor last_grad_norm_;
  ParameterSwap swap_;
  std::vector<StepAfterBase> after_base_;
  bool broadcast_after_base_ = false;
  /// mSAM: each parameter's descent gradients summed over the parts so far.
  std::vector<std::pair<at::Tensor, at::Tensor>> summed_descent_;
  std::unordered_map<const c10::TensorImpl*, std::size_t> summed_index_;
  std::string made_by_;
};

}  // namespace basin
