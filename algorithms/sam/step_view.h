#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "basin/algorithms/sam/group_view.h"
#include "basin/algorithms/sam/ranks.h"
#include "basin/core/engine/pass_hooks.h"

namespace torch::optim { class Optimizer; }

namespace basin {

/// What a SAM rule sees of the step it serves: the groups' views, where
/// their gradients live, reductions that say among whom they run, the base
/// optimizer's state, a forward alone and a step after the base's. Nothing
/// else: a rule reaches neither the shards nor the strategy that placed
/// them, so a new way of placing parameters changes no rule. The step
/// (SAMOptimizer) is the one implementation; rules get it from their hooks.
class StepView {
 public:
  virtual ~StepView() = default;

  /// step(closure) calls so far, this one included.
  virtual int64_t steps() const = 0;
  /// Where the step's collectives run, and a rule's sums with them: the
  /// shards' device, else the first parameter's.
  virtual c10::Device device() const = 0;

  // The parameters.
  /// Every parameter with a gradient, by group, each once; `perturbed_only`
  /// leaves out those SAM leaves at w.
  virtual std::vector<GroupView> groups_with_grads(bool perturbed_only = false) = 0;
  /// Every parameter that requires a gradient, by group, whether or not it
  /// has one now; the views' `grads` are empty.
  virtual std::vector<GroupView> parameter_groups(bool perturbed_only = false) = 0;
  /// The tensor the views list for the model's parameter `param` (this
  /// rank's rows of it where it is in rows), by identity: what a rule's set
  /// of parameters chosen by name is keyed by.
  virtual const c10::TensorImpl* listed_as(const at::Tensor& param) const = 0;

  // Where the gradients live.
  /// The ranks this step's ascent gradients are averaged over: the job for
  /// a synced ascent, this rank for a rank-local one.
  virtual Ranks ascent_ranks() const = 0;
  /// Whether this step's ascent gradients are not whole on every rank (a
  /// synced ascent where a gradient lives on its owner or in rows): a rule
  /// reads them where they are.
  virtual bool ascent_sharded() const = 0;
  /// Whether some synced gradient is in rows (zero3, hsdp): no rank ever
  /// holds it whole.
  virtual bool gradients_in_rows() const = 0;
  /// Whether some synced gradient lives on one owner or in rows (zero2,
  /// zero3, hsdp): what a rule keeps from it is kept there.
  virtual bool gradients_on_owners() const = 0;
  /// Whether each parameter is stepped by its owners alone (zero1-3, hsdp).
  virtual bool parameters_have_owners() const = 0;
  /// Whether this rank steps `param` (all of it, or its rows): everywhere
  /// but where parameters have owners.
  virtual bool owned_here(const at::Tensor& param) const = 0;

  // Reductions, each among `ranks`.
  /// `partial` completed to its sum among `ranks` (a copy; collective for
  /// the job where parameters have owners: see Ranks).
  virtual at::Tensor sum(const at::Tensor& partial, Ranks ranks) = 0;
  /// The elementwise maximum among `ranks`, as `sum` completes a sum: for
  /// the job, over the ranks that share the parameters where they have
  /// owners (values every rank holds alike elsewhere).
  virtual at::Tensor max(const at::Tensor& values, Ranks ranks) = 0;
  /// ||g||^2 in fp32 of the gradients `groups` hold now, among `ranks` (for
  /// the job over the shards where the gradients are not whole).
  virtual at::Tensor gradient_squares(const std::vector<GroupView>& groups, Ranks ranks) = 0;
  /// Sets each group's scale to rho / (||normed|| + epsilon), the norm taken
  /// over every group among `ranks` (for the job, one all-reduce over the
  /// owners' shares where parameters have owners); `params` are the
  /// parameters of `normed`, in order. A zero norm leaves every scale 0: no
  /// direction to climb, no NaN. The norm is the step's last_grad_norm().
  virtual void scale_to_rho(std::vector<Perturbation>& perturbation, const std::vector<GroupView>& groups,
                            const std::vector<at::Tensor>& normed, const std::vector<at::Tensor>& params,
                            Ranks ranks) = 0;
  /// Copies each of `values` (one per tensor of `params`) from the rank
  /// that steps its parameter to every rank that shares it: what an owner
  /// computed for its shard, whole everywhere. Nothing to do without owners.
  virtual void broadcast_from_owners(const std::vector<at::Tensor>& params,
                                     const std::vector<at::Tensor>& values) = 0;

  // The base optimizer and the passes.
  /// The optimizer that steps this rank's tensors and keeps their state
  /// (under zero1-3 the shards' own, over this rank's shard): where a rule
  /// reads the momentum.
  virtual torch::optim::Optimizer& stepping_optimizer() = 0;
  /// A forward alone at the weights as they are now, returning each
  /// sample's loss: a Pass::kDescent pass (BatchNorm statistics untouched),
  /// no gradient touched.
  virtual at::Tensor forward_at_current_weights(const std::function<at::Tensor()>& closure) = 0;
  /// Code to run around each of the step's passes (a variant's noise or
  /// auxiliary adapters, armed for its pass alone); see PassHooks.
  virtual void add_pass_hooks(PassHooks hooks) = 0;
  /// Steps to take after the base's (WSAM's decoupled sharpness step):
  /// param -= scale * direction. Called once from adjust_descent by every
  /// rank, with its own steps or none (a second call replaces the first):
  /// where parameters have owners they then broadcast. A skipped step drops them.
  struct StepAfterBase {
    at::Tensor param;
    at::Tensor direction;
    double scale;
  };
  virtual void step_after_base(std::vector<StepAfterBase> steps) = 0;
};

}  // namespace basin
