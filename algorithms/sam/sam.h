#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "basin/algorithms/sam/buffer_snapshot.h"
#include "basin/algorithms/sam/rule_state.h"
#include "basin/algorithms/sam/run_facts.h"
#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/algorithms/sam/sam_rule.h"
#include "basin/core/engine/algorithm.h"

namespace torch::nn { class Module; }

namespace basin {

/// The defaults a variant gives SAM's own keys, set in line:
/// `SAM(params, SAMDefaults().with_rho(0.5).adaptive())` (ASAM's).
struct SAMDefaults {
  double rho = 0.05;
  double epsilon = 1e-12;
  bool is_adaptive = false;
  double eta = 0.01;
  bool sync_ascent = false;

  SAMDefaults& with_rho(double value) { return rho = value, *this; }
  SAMDefaults& with_epsilon(double value) { return epsilon = value, *this; }
  SAMDefaults& with_eta(double value) { return eta = value, *this; }
  SAMDefaults& adaptive() { return is_adaptive = true, *this; }
  /// The ascent synced over ranks by default (a variant whose why_synced_ascent is not empty).
  SAMDefaults& synced() { return sync_ascent = true, *this; }
};

/// SAM as a plug-in algorithm, and the family's base: a variant subclasses
/// it, reads its keys in its constructor and overrides a few SAMRule hooks.
///
///     {"algorithms": {"sam": {"rho": 0.05, "epsilon": 1e-12, "adaptive": false, "eta": 0.01,
///                             "interval": 1, "sync_ascent": false, "freeze_running_stats": true,
///                             "perturb": "", "start": 0}}}
///
/// On AFTER_SHARDING — after distribution has rebuilt the optimizer — it
/// wraps the state's optimizer in a SAMOptimizer with this rule, once.
/// "rho" may be a list, one value per param group. During the descent pass
/// the model's buffers (BatchNorm running statistics) are snapshotted and
/// restored, so only the ascent pass at w updates them
/// ("freeze_running_stats": false turns that off). "adaptive" is ASAM's
/// e = rho * T^2 g / ||T g||, T = |w| + eta. "sync_ascent" chooses, under
/// data-parallel training, whether the ascent gradients are all-reduced
/// (true) or rank-local as in the SAM paper (false, the default);
/// single-process training ignores it. "perturb" is a regular expression
/// over parameter names (PyTorch's, "layer1.0.bn1.weight"): only the
/// parameters it finds (std::regex_search) are perturbed and normed;
/// SAM-ON's "bn|norm" perturbs the normalization layers alone. "start"
/// (late-phase SAM) takes plain steps before it: a step, or a fraction of
/// the run (0.75: SAM for the last quarter).
class SAM : public Algorithm, public SAMRule, public std::enable_shared_from_this<SAM> {
 public:
  explicit SAM(Params& params) : SAM(params, SAMDefaults{}) {}
  SAM(Params& params, const SAMDefaults& defaults);

  std::string name() const override { return "sam"; }
  bool match(Event event, const State& state) const override;
  void apply(Event event, State& state, Logger& logger) override;

  /// The wrapper's counters and what the rule keeps (its RuleState); the
  /// base's per-parameter state and the groups' hyper-parameters (rho)
  /// travel with the optimizer's state.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  /// The SAM step around `base` with this algorithm's rule: what
  /// AFTER_SHARDING installs, and what make_sam_optimizer returns. `state`
  /// gives what a rule may need of the run: the model (for "perturb",
  /// ASAM's "scale" and the BatchNorm snapshot), the seed, the run's length
  /// and the world size. Once per algorithm: a rule's state serves one step.
  std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base, const State& state);

  const SAMOptions& options() const { return options_; }
  /// The wrapper, once made (null before, or once it is gone).
  std::shared_ptr<SAMOptimizer> optimizer() const { return optimizer_.lock(); }
  /// With "adaptive", whether T scales `param` (|w| + eta) or is 1.
  bool scales(const at::Tensor& param) const {
    return adaptive_ && unscaled_.count(param.unsafeGetTensorImpl()) == 0;
  }

  /// SAM's e, or ASAM's when "adaptive".
  std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups) override;

 protected:
  /// What a variant checks or takes of the run once its step is made
  /// (ASAM's scaled parameters, AE-SAM's run length, what it refuses);
  /// throws ConfigError naming the key.
  virtual void prepare(StepView& /*step*/, const RunFacts& /*run*/) {}
  /// Why the variant needs the ascent gradients averaged over ranks when
  /// training is data-parallel, or "" when a rank-local ascent is sound.
  virtual std::string why_synced_ascent() const { return ""; }
  /// What the rule keeps between steps, for checkpoints: a variant declares
  /// its members here in its constructor.
  RuleState& rule_state() { return rule_state_; }
  bool adaptive() const { return adaptive_; }
  /// With "adaptive", parameters whose T is 1 (ASAM's authors scale the
  /// parameters named "weight" alone).
  void set_unscaled(std::unordered_set<const c10::TensorImpl*> params) { unscaled_ = std::move(params); }
  /// The model's parameters whose names `pattern` finds (regex_search).
  static std::unordered_set<const c10::TensorImpl*> parameters_named(const torch::nn::Module& model,
                                                                    const std::string& pattern);
  /// "config key 'algorithms.<name>.<key>'", for messages.
  std::string key(const std::string& name) const { return "config key '" + path_ + "." + name + "'"; }

  SAMOptions options_;

 private:
  void install_state_hooks(State& state);
  std::shared_ptr<SAMRule> shared_rule();

  std::string path_;
  std::string perturb_;
  double start_fraction_ = 0;
  std::vector<double> group_rho_;
  bool adaptive_ = false;
  bool freeze_running_stats_ = true;
  std::unordered_set<const c10::TensorImpl*> unscaled_;
  std::weak_ptr<SAMOptimizer> optimizer_;  // the step owns its rule, not the other way round
  bool made_ = false;
  bool sync_ascent_given_ = false;
  RuleState rule_state_;
  BufferSnapshot running_stats_;
  PassRequest outer_request_;
};

}  // namespace basin
