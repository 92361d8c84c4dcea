#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/optim/optimizer.h>

#include "basin/core/group_sync.h"
#include "basin/core/optimizer_state.h"
#include "basin/core/pass_hooks.h"
#include "basin/core/reused_buffers.h"
#include "basin/core/pass_request.h"
#include "basin/core/state.h"

namespace basin {

class ShardedParameters;

/// Settings of the SAM step. Per-group values ("rho", "eta") live in the
/// wrapper's param groups, so schedulers can drive them; these are defaults.
struct SAMOptions {
  double rho = 0.05;       // radius of the ascent step
  double epsilon = 1e-12;  // added to the gradient norm
  bool adaptive = false;   // ASAM: scale the ascent elementwise by |w| + eta
  double eta = 0.01;
  int64_t interval = 1;    // SAM step every `interval` steps, plain steps between
  /// Whether the ascent gradients are averaged over ranks. Only then may the
  /// norm be taken over shards (rank-local ascent needs each rank's own norm).
  bool sync_ascent = false;
  /// mSAM: the batch is split into this many parts, each perturbed from its
  /// own gradient; the descent gradients are summed over the parts.
  int64_t parts = 1;
  /// Late-phase SAM: plain steps before this step (counting every step).
  int64_t start = 0;
};

/// Sharpness-Aware Minimization around any LibTorch optimizer.
///
/// `step(closure)`:
///   ascent    closure at w: gradients g
///   norm      ||g|| in fp32 (the variant decides what is normed)
///   perturb   w + e(w) is written into buffers allocated once and reused,
///             e = rho * g / (||g|| + epsilon); each parameter then takes the
///             buffer's storage, its own storage staying aside untouched
///   descent   closure at w + e: gradients g(w + e)
///   restore   each parameter takes its own storage back: w is bit-exact by
///             construction (never w + e - e), and no copy is made
///   step      base optimizer steps at w with g(w + e)
/// With `parts` > 1 (mSAM) ascent, perturb, descent and restore run once per
/// part of the batch (the closure reads `part()` and returns that part's
/// mean loss, as for a whole batch), and the base steps with the mean of the
/// parts' descent gradients; the step returns the mean of their losses.
/// A skipped pass (gradients_finite false) zeroes gradients and restores w.
/// `step()` without a closure is one plain base step. Like any closure given
/// to a LibTorch optimizer, the closure must zero the gradients first.
///
/// Hyper-parameters are one source of truth with the base (GroupSync):
/// schedulers and users may set them on either optimizer.
///
/// Variants subclass it and override `perturbation` (what e(w) is) and/or
/// `adjust_descent_gradients` (what the base step uses); what they keep
/// between steps they save through `variant_states`.
class SAMOptimizer : public torch::optim::Optimizer, public PassAwareOptimizer, public WrappingOptimizer {
 public:
  SAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options = {});

  at::Tensor step(LossClosure closure = nullptr) override;

  torch::optim::Optimizer& base() { return *base_; }
  const std::shared_ptr<torch::optim::Optimizer>& base_ptr() const { return base_; }
  const SAMOptions& options() const { return options_; }
  void add_pass_hooks(PassHooks hooks) override { hooks_.push_back(std::move(hooks)); }

  /// Copies hyper-parameters and groups changed on either side to the other.
  void sync_param_groups() override;

  /// SAM keeps no per-parameter state between steps: the base's is the state.
  ParameterStates parameter_states(const ParameterNumbering& numbering) override;
  void load_parameter_states(const ParameterStates& states, const ParameterNumbering& numbering) override;
  /// The counters (steps, SAM steps, skipped steps) for a checkpoint; the
  /// interval's phase follows from `steps`.
  StateDict counters() const;
  void load_counters(const StateDict& counters);

  /// Parameters SAM leaves at w: not perturbed and not in the norm (SAM-ON
  /// perturbs the normalization layers alone). Their descent gradients are
  /// taken at the perturbed point of the others all the same.
  void set_unperturbed(std::unordered_set<const c10::TensorImpl*> params) { unperturbed_ = std::move(params); }
  bool perturbs(const at::Tensor& param) const {
    return unperturbed_.count(param.unsafeGetTensorImpl()) == 0 && resting_.count(param.unsafeGetTensorImpl()) == 0;
  }
  /// With `adaptive`, parameters whose scale T is 1 rather than |w| + eta
  /// (ASAM's authors scale the parameters named "weight" alone).
  void set_unscaled(std::unordered_set<const c10::TensorImpl*> params) { unscaled_ = std::move(params); }
  bool scales(const at::Tensor& param) const {
    return options_.adaptive && unscaled_.count(param.unsafeGetTensorImpl()) == 0;
  }

  /// What a variant keeps per parameter between steps (moving averages), by
  /// parameter index, for checkpoints; SAM keeps nothing.
  virtual ParameterStates variant_states(const ParameterNumbering& /*numbering*/) const { return new_parameter_states(); }
  virtual void load_variant_states(const ParameterStates& /*states*/, const ParameterNumbering& /*numbering*/) {}
  /// Scalars a variant keeps between steps (running statistics), for checkpoints.
  virtual StateDict variant_values() const { return new_state_dict(); }
  virtual void load_variant_values(const StateDict& /*values*/) {}

  /// The pass the closure is running now (kPlain between steps).
  Pass pass() const { return pass_; }
  /// What the closure runs on and returns in this pass (see PassRequest):
  /// the whole batch and its mean loss but where a variant asks otherwise
  /// (mSAM's parts, ESAM's forward alone and its descent's samples).
  const PassRequest& request() const { return request_; }
  /// The part of the batch the closure runs on (mSAM), of `parts()`: 0 of 1
  /// for SAM, and for the plain steps between SAM steps (`interval`), which
  /// take the whole batch.
  int64_t part() const { return request_.part; }
  int64_t parts() const { return request_.parts; }
  int64_t steps() const { return steps_; }          // step(closure) calls
  /// Of which took the descent pass (two passes or more), or for one-pass
  /// variants ran their pass at a perturbed point.
  int64_t sam_steps() const { return sam_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  /// fp32 norm the last perturbation was scaled by (of the gradient, of
  /// T g for ASAM, of the momentum for momentum_sam).
  const at::Tensor& last_grad_norm() const { return last_grad_norm_; }
  /// The buffers that hold w + e during the descent, one per parameter with
  /// a gradient that this rank owns: the one extra copy of the parameters
  /// (of this rank's shard under ZeRO-1) SAM keeps.
  const std::vector<at::Tensor>& perturbed_buffers() const { return perturbed_.buffers(); }

  /// Saves the base optimizer (its own archive), the wrapper's counters and
  /// every group's hyper-parameters, which LibTorch's archive drops.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 protected:
  /// The parameters of one group that have gradients, with the group's options.
  struct GroupView {
    std::vector<at::Tensor> params;
    std::vector<at::Tensor> grads;
    torch::optim::OptimizerOptions* options;
    double get(const std::string& name) const;
  };

  /// e = scale * direction for every parameter of one group.
  struct Perturbation {
    std::vector<at::Tensor> directions;  // one per parameter of the group's view
    double scale = 0;                    // 0: the group stays at w
  };

  /// e(w) per group, given the ascent gradients of the parameters it
  /// perturbs (runs without grad). The default is SAM's rho * g / ||g||, or
  /// ASAM's rho * T^2 g / ||T g|| with T = |w| + eta when adaptive.
  virtual std::vector<Perturbation> perturbation(std::vector<GroupView>& groups);
  /// Last chance to change the descent gradients before the base step.
  /// Under ZeRO-1 only the gradients this rank owns are averaged over ranks
  /// at this point (the others stay rank-local): a reduction over all
  /// parameters (a norm, a dot product) must be taken over shards, as
  /// global_norm_over_shards does.
  virtual void adjust_descent_gradients(std::vector<GroupView>& /*groups*/) {}
  /// Runs after the base optimizer stepped (WSAM's decoupled sharpness step).
  virtual void after_base_step() {}
  /// Called after the ascent pass with every parameter's gradient: whether
  /// this step perturbs and takes its descent pass. False: the base steps with
  /// the ascent gradients as this leaves them, one pass in all (AE-SAM's plain
  /// steps, LookSAM's reuse steps). Not called with parts > 1.
  virtual bool descend(std::vector<GroupView>& /*groups*/) { return true; }
  /// One-pass variants (Momentum-SAM) know e(w) before the step, from what
  /// the optimizers keep: true makes every SAM step call
  /// `perturbation_before_pass` with views that hold no gradients, run its
  /// one pass at w + e as Pass::kPlain (gradients synced, BatchNorm statistics
  /// updated, as in any plain step), restore w and step the base with those
  /// gradients.
  virtual bool perturbs_before_pass() const { return false; }
  /// ESAM: true makes the ascent pass return each sample's loss; they go to
  /// `descent_samples`, called at w + e before the descent pass, which may
  /// run `forward_at_current_weights` and returns the samples (indices into
  /// the batch, int64 on the CPU) the descent runs on; undefined: all.
  virtual bool wants_ascent_sample_losses() const { return false; }
  virtual at::Tensor descent_samples(const at::Tensor& /*ascent_losses*/, const LossClosure& /*closure*/) {
    return {};
  }
  /// Around the ascent pass, however it ends (ESAM's weight selection).
  virtual void before_ascent() {}
  virtual void after_ascent() {}
  virtual std::vector<Perturbation> perturbation_before_pass(std::vector<GroupView>& groups) {
    return std::vector<Perturbation>(groups.size());
  }

  /// Every parameter with a gradient, by group; `perturbed_only` leaves out
  /// the unperturbed ones.
  std::vector<GroupView> groups_with_grads(bool perturbed_only = false);
  /// Every parameter that requires a gradient, by group, whether or not it
  /// has one now; the views' `grads` are empty.
  std::vector<GroupView> parameter_groups(bool perturbed_only = false);
  /// The parameters of `groups`, in order.
  static std::vector<at::Tensor> parameters_of(const std::vector<GroupView>& groups);
  /// Under ZeRO-1, whether this rank owns `param` (its descent gradient is
  /// the average over ranks); always true otherwise.
  bool owns(const at::Tensor& param) const;
  /// The ZeRO-1 shards when the base is sharded, else nullptr.
  ShardedParameters* shards() const;
  /// `partial` (sums over the parameters this rank owns) added up over ranks
  /// under ZeRO-1; `partial` itself otherwise. Collective under ZeRO-1.
  at::Tensor sum_over_shards(const at::Tensor& partial);
  /// A forward alone at the weights as they are now, returning each
  /// sample's loss: a Pass::kDescent pass (BatchNorm statistics untouched),
  /// no gradient touched.
  at::Tensor forward_at_current_weights(const LossClosure& closure);
  /// Leaves `params` at w in this step alone, out of the norm (ESAM's weight
  /// selection); cleared when the step ends.
  void rest_this_step(std::unordered_set<const c10::TensorImpl*> params) { resting_ = std::move(params); }

  /// Sets each group's scale to rho / (||normed|| + epsilon), the norm taken
  /// over every group (over shards when the ascent is synced under ZeRO-1:
  /// one all-reduce); `params` are the parameters of `normed`, in order.
  /// A zero norm leaves every scale 0: no direction to climb, no NaN.
  void scale_to_rho(std::vector<Perturbation>& perturbation, const std::vector<GroupView>& groups,
                    const std::vector<at::Tensor>& normed, const std::vector<at::Tensor>& params);

 private:
  at::Tensor run_pass(Pass pass, const LossClosure& closure, PassRequest request = {});
  /// Ascent, perturbation, descent and restore on part `part_` of the batch;
  /// adds its loss to `loss`. False when a pass overflowed (w is restored).
  bool sam_part(const LossClosure& closure, at::Tensor& loss, bool& descended);
  bool gradients_finite(Pass pass);
  void before_base_step();
  at::Tensor plain_step(const LossClosure& closure);
  at::Tensor one_pass_step(const LossClosure& closure);
  std::vector<GroupView> views(bool perturbed_only, bool with_grads);
  void skip_step();
  void move_to_perturbed(const std::vector<GroupView>& groups, const std::vector<Perturbation>& perturbation);
  /// Swaps w back. Parameters this rank does not own (ZeRO-1) were perturbed
  /// in place; their owners' broadcast restores them, in the base step or,
  /// when no base step follows, here.
  void restore_weights(bool base_step_follows, bool collectives_allowed = true);

  std::shared_ptr<torch::optim::Optimizer> base_;
  SAMOptions options_;
  GroupSync sync_;
  std::vector<PassHooks> hooks_;
  Pass pass_ = Pass::kPlain;
  int64_t steps_ = 0;
  int64_t sam_steps_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t part_ = 0;
  PassRequest request_;
  std::unordered_set<const c10::TensorImpl*> unperturbed_;
  std::unordered_set<const c10::TensorImpl*> unscaled_;
  std::unordered_set<const c10::TensorImpl*> resting_;
  at::Tensor last_grad_norm_;
  ReusedBuffers perturbed_;  // w + e during the descent, one per parameter with a gradient
  /// Parameters now holding w + e, with their own storage (w) set aside.
  std::vector<std::pair<at::Tensor, at::Tensor>> swapped_;
  /// mSAM: each parameter's descent gradients summed over the parts so far.
  std::vector<std::pair<at::Tensor, at::Tensor>> summed_descent_;
  std::unordered_map<const c10::TensorImpl*, std::size_t> summed_index_;
};

}  // namespace basin
