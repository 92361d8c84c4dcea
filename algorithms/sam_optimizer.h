#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

#include "basin/core/group_sync.h"
#include "basin/core/optimizer_state.h"
#include "basin/core/pass_hooks.h"
#include "basin/core/reused_buffers.h"
#include "basin/core/state.h"

namespace basin {

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
/// A skipped pass (gradients_finite false) zeroes gradients and restores w.
/// `step()` without a closure is one plain base step. Like any closure given
/// to a LibTorch optimizer, the closure must zero the gradients first.
///
/// Hyper-parameters are one source of truth with the base (GroupSync):
/// schedulers and users may set them on either optimizer.
///
/// Variants subclass it and override `perturbation` (what e(w) is) and/or
/// `adjust_descent_gradients` (what the base step uses).
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

  /// The pass the closure is running now (kPlain between steps).
  Pass pass() const { return pass_; }
  int64_t steps() const { return steps_; }          // step(closure) calls
  int64_t sam_steps() const { return sam_steps_; }  // of which two-pass SAM steps
  int64_t skipped_steps() const { return skipped_steps_; }
  /// fp32 norm the last perturbation was scaled by.
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

  /// e(w) per group, given the ascent gradients (runs without grad). The
  /// default is SAM's rho * g / ||g||, or ASAM's rho * T^2 g / ||T g|| with
  /// T = |w| + eta when adaptive.
  virtual std::vector<Perturbation> perturbation(std::vector<GroupView>& groups);
  /// Last chance to change the descent gradients before the base step.
  /// Under ZeRO-1 only the gradients this rank owns are averaged over ranks
  /// at this point (the others stay rank-local): a reduction over all
  /// parameters (a norm, a dot product) must be taken over shards, as
  /// global_norm_over_shards does.
  virtual void adjust_descent_gradients(std::vector<GroupView>& /*groups*/) {}

  std::vector<GroupView> groups_with_grads();

 private:
  at::Tensor run_pass(Pass pass, const LossClosure& closure);
  bool gradients_finite(Pass pass);
  void before_base_step();
  at::Tensor plain_step(const LossClosure& closure);
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
  at::Tensor last_grad_norm_;
  ReusedBuffers perturbed_;  // w + e during the descent, one per parameter with a gradient
  /// Parameters now holding w + e, with their own storage (w) set aside.
  std::vector<std::pair<at::Tensor, at::Tensor>> swapped_;

};

}  // namespace basin
