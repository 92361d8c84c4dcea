#include "basin/algorithms/sam/sam_optimizer.h"

#include <stdexcept>
#include <unordered_set>

#include <ATen/ATen.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

namespace {

std::map<std::string, double> group_values(const SAMOptions& options) {
  return {{"rho", options.rho}, {"eta", options.eta}};
}

}  // namespace

SAMOptimizer::SAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options,
                           std::shared_ptr<SAMRule> rule, ShardedParameters* shards)
    : Optimizer(GroupSync(group_values(options)).mirror_groups(*base),
                GroupSync(group_values(options)).mirror_defaults(*base)),
      base_(std::move(base)),
      options_(options),
      rule_(rule ? std::move(rule) : std::make_shared<SAMRule>()),
      plan_(dynamic_cast<PassPlan*>(rule_.get())),
      shards_(shards != nullptr ? shards : shards_of(*base_)),
      sync_(group_values(options)) {
  if (!(options_.rho >= 0)) throw std::invalid_argument("SAM: rho must be >= 0");
  if (!(options_.epsilon >= 0)) throw std::invalid_argument("SAM: epsilon must be >= 0");
  if (options_.interval < 1) throw std::invalid_argument("SAM: interval must be >= 1");
  if (options_.parts < 1) throw std::invalid_argument("SAM: parts must be >= 1");
  if (plan_ != nullptr && options_.parts != 1) {
    throw std::invalid_argument("SAM: a planned pass is not split into parts");
  }
  if (dynamic_cast<SAMOptimizer*>(base_.get()) != nullptr) {
    throw std::invalid_argument("SAM: the base optimizer is already a SAMOptimizer");
  }
  synced_gradients_whole_ = !some_gradient_not_whole(shards_, unique_parameters(*base_));
  sync_.start(*this, *base_);
}

void SAMOptimizer::sync_param_groups() { sync_.sync(*this, *base_); }

std::vector<GroupView> SAMOptimizer::views(bool perturbed_only, bool with_grads) {
  std::vector<GroupView> groups;
  // A tensor listed twice (tied weights, or in two groups) is perturbed, normed and restored once.
  std::unordered_set<const c10::TensorImpl*> seen;
  for (auto& group : param_groups_) {
    GroupView view{{}, {}, {}, &group.options()};
    for (const auto& p : group.params()) {
      if (!p.requires_grad() || (with_grads && !p.grad().defined()) || (perturbed_only && !perturbs(p)) ||
          !seen.insert(p.unsafeGetTensorImpl()).second) {
        continue;
      }
      view.params.push_back(p);
      if (with_grads) view.grads.push_back(p.grad());
      view.shares.push_back(share_of(p));
    }
    groups.push_back(std::move(view));
  }
  return groups;
}

void SAMOptimizer::move_to_perturbed(const std::vector<GroupView>& groups, const std::vector<Perturbation>& perturbation) {
  swap_.move(groups, perturbation, [this](const at::Tensor& p) { return shards_ == nullptr || shards_->owns(p); });
  // Each owner perturbed its own shard: the others take w + e from it.
  if (shards_ != nullptr && (rule_->perturbs_on_owners() || ascent_sharded())) shards_->broadcast_parameters();
}

at::Tensor SAMOptimizer::run_pass(Pass pass, const LossClosure& closure, PassRequest request) {
  pass_ = pass;
  request.part = pass == Pass::kPlain ? 0 : part_;
  request.parts = pass == Pass::kPlain ? 1 : options_.parts;
  // The one place a pass's gradient sync is decided: the ascent's as
  // configured, every other pass's where its gradients are stepped.
  request.sync = pass != Pass::kAscent || ascent_is_the_step_ ? GradientSync::kWhereStepped
                 : options_.sync_ascent ? GradientSync::kEverywhere
                                        : GradientSync::kNone;
  request_ = std::move(request);
  for (auto& h : hooks_) {
    if (h.before_pass) h.before_pass(pass);
  }
  auto after = [this, pass] {
    for (auto h = hooks_.rbegin(); h != hooks_.rend(); ++h) {
      if (h->after_pass) h->after_pass(pass);
    }
    pass_ = Pass::kPlain;
    request_ = PassRequest{};
  };
  at::Tensor loss;
  try {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  } catch (...) {
    after();  // BatchNorm statistics and the state's pass come back even then
    throw;
  }
  after();
  return loss;
}

bool SAMOptimizer::gradients_finite(Pass pass) {
  bool finite = true;
  for (auto& h : hooks_) {
    if (h.gradients_finite) finite = h.gradients_finite(pass) && finite;  // every check runs (each unscales)
  }
  return finite;
}

void SAMOptimizer::base_step() {
  for (auto& h : hooks_) {
    if (h.before_base_step) h.before_base_step();
  }
  base_->step();
  if (!broadcast_after_base_) return;
  at::NoGradGuard no_grad;
  for (auto& s : after_base_) s.param.add_(s.direction, -s.scale);
  after_base_.clear();
  broadcast_after_base_ = false;
  if (shards_ != nullptr) shards_->broadcast_parameters();  // each owner moved its shard
}

void SAMOptimizer::skip_step() {
  ++skipped_steps_;
  after_base_.clear();
  broadcast_after_base_ = false;
  zero_grad();
}

at::Tensor SAMOptimizer::plain_step(const LossClosure& closure) {
  at::Tensor loss = run_pass(Pass::kPlain, closure);
  if (gradients_finite(Pass::kPlain)) {
    base_step();
  } else {
    skip_step();
  }
  return loss;
}

void SAMOptimizer::restore_weights(bool base_step_follows, bool collectives_allowed) {
  swap_.restore();
  // Under ZeRO-1 the skip decision is agreed by every rank, so every rank
  // (whether or not it perturbed anything) joins the owners' broadcast.
  if (shards_ != nullptr && !base_step_follows && collectives_allowed) shards_->broadcast_parameters();
}

at::Tensor SAMOptimizer::step(LossClosure closure) {
  sync_param_groups();
  // A step that threw after adjust_descent leaves no decoupled step behind for this one.
  after_base_.clear();
  broadcast_after_base_ = false;
  if (!closure) {
    base_->step();
    return {};
  }
  // Plain steps before `start` (late-phase SAM), then a SAM step every `interval`.
  const bool sam_step = steps_ >= options_.start && (steps_ - options_.start) % options_.interval == 0;
  ++steps_;
  if (!sam_step) return plain_step(closure);
  if (!rule_->ascent_pass()) return one_pass_step(closure);

  at::Tensor loss;
  struct StepReset {  // part 0 and no resting parameter again however the step ends, a throwing closure included
    int64_t& part;
    std::unordered_set<const c10::TensorImpl*>& resting;
    ~StepReset() {
      part = 0;
      resting.clear();
    }
  } reset{part_, resting_};
  summed_descent_.clear();
  summed_index_.clear();
  bool descended = true;
  for (part_ = 0; part_ < options_.parts && descended; ++part_) {
    if (!sam_part(closure, loss, descended)) {
      skip_step();
      return loss;
    }
  }
  if (options_.parts > 1) {
    take_descent_mean();
    loss = loss / static_cast<double>(options_.parts);  // each part's closure gave its part's mean loss
  }
  if (descended) {
    at::NoGradGuard no_grad;
    auto descent = views(/*perturbed_only=*/false, /*with_grads=*/true);
    rule_->adjust_descent(view(), descent);
  }
  base_step();
  return loss;
}

at::Tensor SAMOptimizer::one_pass_step(const LossClosure& closure) {
  auto groups = views(/*perturbed_only=*/true, /*with_grads=*/false);
  at::Tensor loss;
  bool finite = false;
  try {
    {
      at::NoGradGuard no_grad;
      const auto perturbation = rule_->perturbation(view(), groups);
      move_to_perturbed(groups, perturbation);
      if (rule_->perturbs(perturbation)) ++sam_steps_;
    }
    PassRequest request;
    request.loss_weight = rule_->pass_loss_weight();
    loss = run_pass(Pass::kPlain, closure, request);
    finite = gradients_finite(Pass::kPlain);
  } catch (...) {
    restore_weights(/*base_step_follows=*/false, /*collectives_allowed=*/false);
    throw;
  }
  restore_weights(/*base_step_follows=*/finite);
  if (!finite) {
    skip_step();
    return loss;
  }
  {
    at::NoGradGuard no_grad;
    auto pass = views(/*perturbed_only=*/false, /*with_grads=*/true);
    rule_->adjust_descent(view(), pass);
  }
  base_step();
  return loss;
}

at::Tensor SAMOptimizer::forward_at_current_weights(const LossClosure& closure) {
  PassRequest forward_only;
  forward_only.backward = false;
  forward_only.per_sample_losses = true;
  return run_pass(Pass::kDescent, closure, forward_only);
}

at::Tensor SAMOptimizer::ascent(const LossClosure& closure, at::Tensor& sample_losses, bool& all_resting) {
  AscentPlan plan = plan_ != nullptr ? plan_->ascent(view(), steps_ - 1) : AscentPlan{};
  // A plan that rests every tensor the loss reaches leaves nothing to
  // perturb (and no gradient to take): a plain step with the ascent's
  // gradients, taken for every tensor. The tensors the loss reaches are
  // those with a gradient from the step before (all of them before the first).
  all_resting = false;
  std::vector<at::Tensor> frozen;
  if (plan_ != nullptr) {
    bool any_graded = false, chosen_graded = false;
    std::size_t perturbable = 0;
    const auto groups = views(/*perturbed_only=*/true, /*with_grads=*/false);
    for (const auto& g : groups) {
      perturbable += g.params.size();
      for (const auto& p : g.params) {
        if (!p.grad().defined()) continue;
        any_graded = true;
        chosen_graded = chosen_graded || plan.resting.count(p.unsafeGetTensorImpl()) == 0;
      }
    }
    if (!synced_gradients_whole_) {
      // A synced gradient may sit on its owner only (ZeRO-2): the ranks together hold them all.
      std::vector<at::Tensor> flags{at::tensor({any_graded ? 1.0f : 0.0f, chosen_graded ? 1.0f : 0.0f}).to(device())};
      shards_->communicator().all_reduce_max(flags);
      const at::Tensor agreed = flags.front().cpu();
      any_graded = agreed[0].item<float>() > 0;
      chosen_graded = agreed[1].item<float>() > 0;
    }
    all_resting = any_graded ? !chosen_graded : plan.resting.size() == perturbable;
    if (!all_resting) {
      for (const auto& g : groups) {
        for (const auto& p : g.params) {
          if (plan.resting.count(p.unsafeGetTensorImpl()) == 0) continue;
          frozen.push_back(p);  // no weight gradient in this pass: autograd skips that work
          at::Tensor(p).requires_grad_(false);
        }
      }
    }
  }
  if (!all_resting) resting_ = std::move(plan.resting);
  PassRequest request;
  request.per_sample_losses = plan.per_sample_losses;
  at::Tensor loss;
  // Every tensor resting: the base steps with this pass's gradients, so they sync as a descent's would.
  ascent_is_the_step_ = all_resting;
  try {
    loss = run_pass(Pass::kAscent, closure, request);
  } catch (...) {
    ascent_is_the_step_ = false;
    for (auto& p : frozen) p.requires_grad_(true);
    throw;
  }
  ascent_is_the_step_ = false;
  for (auto& p : frozen) p.requires_grad_(true);
  if (plan.per_sample_losses) {
    if (loss.dim() != 1 || loss.numel() == 0) {
      throw std::logic_error("SAM: the closure returned a loss of " + std::to_string(loss.dim()) +
                             " dimensions where each sample's loss was asked for (request().per_sample_losses)");
    }
    sample_losses = loss;
    loss = loss.mean();
  }
  return loss;
}

bool SAMOptimizer::sam_part(const LossClosure& closure, at::Tensor& loss, bool& descended) {
  at::Tensor ascent_losses;
  bool all_resting = false;
  const at::Tensor part_loss = ascent(closure, ascent_losses, all_resting);
  loss = loss.defined() ? loss + part_loss : part_loss;
  if (!gradients_finite(Pass::kAscent)) return false;  // nothing is perturbed now
  if (options_.parts == 1) {
    at::NoGradGuard no_grad;
    auto all = views(/*perturbed_only=*/false, /*with_grads=*/true);
    descended = !all_resting && rule_->descend(view(), all);
    if (!descended) return true;  // the base steps with the ascent gradients as descend() left them
  }
  if (part_ == 0) ++sam_steps_;
  bool finite = false;
  try {
    {
      // The views hold the ascent's gradients: they go before the descent's
      // backward, which (where zero_grad sets them to none) makes new ones.
      at::NoGradGuard no_grad;
      auto groups = views(/*perturbed_only=*/true, /*with_grads=*/true);
      move_to_perturbed(groups, rule_->perturbation(view(), groups));
    }
    PassRequest descent;
    if (plan_ != nullptr) descent.samples = plan_->descent_samples(view(), ascent_losses, closure);
    run_pass(Pass::kDescent, closure, descent);
    finite = gradients_finite(Pass::kDescent);
  } catch (...) {
    // Whatever failed, this rank's own weights return to w. No collective:
    // the other ranks may be elsewhere; the run is failing anyway.
    restore_weights(/*base_step_follows=*/false, /*collectives_allowed=*/false);
    throw;
  }
  // The next part's ascent starts from w again: only the last part's restore
  // may leave ZeRO-1's unowned parameters to the base step's broadcast.
  restore_weights(/*base_step_follows=*/finite && part_ + 1 == options_.parts);
  if (finite && options_.parts > 1) add_to_descent_sum();
  return finite;
}

}  // namespace basin
