#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "basin/algorithms/buffer_snapshot.h"
#include "basin/algorithms/sam_optimizer.h"
#include "basin/core/algorithm.h"

namespace torch::nn { class Module; }

namespace basin {

/// The defaults a variant gives SAM's own keys (ASAM: rho 0.5, adaptive).
struct SAMDefaults {
  double rho = 0.05;
  double epsilon = 1e-12;
  bool adaptive = false;
  double eta = 0.01;
  bool sync_ascent = false;
};

/// SAM as a plug-in algorithm:
///
///     {"algorithms": {"sam": {"rho": 0.05, "epsilon": 1e-12, "adaptive": false, "eta": 0.01,
///                             "interval": 1, "sync_ascent": false, "freeze_running_stats": true,
///                             "perturb": "", "start": 0}}}
///
/// On AFTER_SHARDING — after distribution has rebuilt the optimizer — it
/// wraps the state's optimizer in a SAMOptimizer, once. "rho" may be a list,
/// one value per param group. During the descent pass the model's buffers
/// (BatchNorm running statistics) are snapshotted and restored, so only the
/// ascent pass at w updates them ("freeze_running_stats": false turns that
/// off). "sync_ascent" chooses, under data-parallel training, whether the
/// ascent gradients are all-reduced (true) or rank-local as in the SAM paper
/// (false, the default); single-process training ignores it. "perturb" is
/// a regular expression over parameter names (PyTorch's, "layer1.0.bn1.weight"):
/// only the parameters it finds (std::regex_search) are perturbed and normed;
/// SAM-ON's "bn|norm" perturbs the normalization layers alone. "start"
/// (late-phase SAM) takes plain steps before it: a step, or a fraction of
/// the run (0.75: SAM for the last quarter).
///
/// Variants subclass it: a constructor that reads their keys (and gives
/// SAM's theirs defaults), `name`, and `make_optimizer` to build their own
/// SAMOptimizer subclass.
class SAM : public Algorithm {
 public:
  explicit SAM(Params& params) : SAM(params, SAMDefaults{}) {}
  SAM(Params& params, const SAMDefaults& defaults);

  std::string name() const override { return "sam"; }
  bool match(Event event, const State& state) const override;
  void apply(Event event, State& state, Logger& logger) override;

  /// The wrapper's counters and a variant's per-parameter state; the base's
  /// per-parameter state and the groups' hyper-parameters (rho) travel with
  /// the optimizer's state.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  const SAMOptions& options() const { return options_; }
  bool sync_ascent() const { return sync_ascent_; }
  bool freeze_running_stats() const { return freeze_running_stats_; }
  /// The wrapper, once AFTER_SHARDING has run.
  const std::shared_ptr<SAMOptimizer>& optimizer() const { return optimizer_; }

 protected:
  /// The wrapper around `base`; `state.model` names the parameters.
  virtual std::shared_ptr<SAMOptimizer> make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                       const SAMOptions& options, const State& state);
  /// Why the variant needs the ascent gradients averaged over ranks when
  /// training is data-parallel, or "" when a rank-local ascent is sound.
  virtual std::string why_synced_ascent() const { return ""; }
  /// The model's parameters whose names `pattern` finds (regex_search).
  static std::unordered_set<const c10::TensorImpl*> parameters_named(const torch::nn::Module& model,
                                                                    const std::string& pattern);
  /// The run's length in optimizer steps, as the trainer stops it (0 when the
  /// state does not know it). Resolved when the algorithm wraps: a run
  /// resumed with another length resolves "start" and AE-SAM's T anew.
  static int64_t run_length(const State& state);
  /// "config key 'algorithms.<name>.<key>'", for messages.
  std::string key(const std::string& name) const { return "config key '" + path_ + "." + name + "'"; }

  SAMOptions options_;

 private:
  void wrap(State& state);

  std::string path_;
  std::string perturb_;
  double start_fraction_ = 0;
  std::vector<double> group_rho_;
  bool sync_ascent_ = false;
  bool freeze_running_stats_ = true;
  std::shared_ptr<SAMOptimizer> optimizer_;
  BufferSnapshot running_stats_;
  bool outer_skip_gradient_sync_ = false;
};

}  // namespace basin
