#pragma once

#include <algorithm>
#include <vector>

#include "basin/algorithms/sam/group_view.h"
#include "basin/algorithms/sam/ranks.h"

namespace basin {

class StepView;

/// What a SAM variant changes in the one SAM step (SAMOptimizer): three
/// hooks and a property, each with SAM's behaviour by default. Hooks run
/// without grad (they may change gradients in place) and receive the
/// groups' views, which say where each parameter is placed, and the step's
/// view (StepView), which offers what they need besides (the norm scaled to
/// rho, reductions among the job or this rank, a step after the base's). What a rule keeps between steps it declares as a
/// RuleState (see SAM::rule_state), not through hooks; what a pass runs on
/// is a second, optional contract (PassPlan).
class SAMRule {
 public:
  virtual ~SAMRule() = default;

  /// e(w) per group, from the ascent gradients of the parameters it
  /// perturbs. SAM's is rho * g / (||g|| + epsilon), the norm over every
  /// group (step.scale_to_rho). A rule whose `ascent_pass()` is false gets
  /// views without gradients, before the step's one pass.
  virtual std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups);
  /// After the ascent pass, with every parameter's gradient: whether this
  /// step perturbs and takes its descent pass. False: the base steps with
  /// the ascent gradients as this leaves them (AE-SAM's plain steps,
  /// LookSAM's reuse steps). Not asked with parts > 1 (mSAM).
  virtual bool descend(StepView& /*step*/, std::vector<GroupView>& /*groups*/) { return true; }
  /// The descent gradients, last, before the base steps (GSAM, WSAM,
  /// LookSAM); for a rule without an ascent pass, its one pass's (Bi-LoRA
  /// ascends its auxiliary adapters here). Under ZeRO-1 only the gradients this rank owns are averaged
  /// over ranks here: a reduction over all parameters is taken among the
  /// job (step.sum(partial, Ranks::kJob)).
  virtual void adjust_descent(StepView& /*step*/, std::vector<GroupView>& /*groups*/) {}
  /// False for a rule that knows e before the step (Momentum-SAM, from the
  /// optimizer's momentum): the step runs one pass at w + e as a plain pass
  /// (gradients synced, BatchNorm statistics updated), restores w and steps
  /// the base with those gradients.
  virtual bool ascent_pass() const { return true; }
  /// For a rule without an ascent pass, what its pass's loss is weighted by
  /// on this rank before backward (PassRequest::loss_weight): RWP's mixed
  /// form, 2 lambda on its perturbed ranks and 2 (1 - lambda) on its clean
  /// ones, whose gradients the reduction averages into their mix.
  virtual double pass_loss_weight() const { return 1; }
  /// For a rule without an ascent pass, given its `perturbation()`: whether
  /// this step's pass runs at a perturbed point anywhere in the job, which
  /// SAMOptimizer::sam_steps() counts. SAM's: a group's scale is not 0
  /// (Momentum-SAM's first step has no momentum yet). A rule that perturbs
  /// inside the forward (Flat-LoRA's noise, Bi-LoRA's auxiliary adapters) or
  /// on other ranks (RWP's mixed form, on its clean ranks) says so itself.
  virtual bool perturbs(const std::vector<Perturbation>& perturbation) const {
    return std::any_of(perturbation.begin(), perturbation.end(), [](const Perturbation& p) { return p.scale != 0; });
  }
  /// True for a rule whose e is known on the owners alone under sharding
  /// (Momentum-SAM reads each shard's momentum on its owner): its
  /// perturbation's norm is taken over shards, and the owners' perturbed
  /// parameters are gathered to every rank before the pass runs.
  virtual bool perturbs_on_owners() const { return false; }

 protected:
  /// Among whom this rule's perturbation is normed: the ranks its ascent
  /// gradients were averaged over, or the job for a rule that perturbs on
  /// the owners.
  Ranks perturbation_ranks(const StepView& step) const;
};

}  // namespace basin
