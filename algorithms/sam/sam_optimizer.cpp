#include "basin/algorithms/sam_optimizer.h"

#include <stdexcept>
#include <unordered_set>

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>

#include "basin/core/hyperparameters.h"
#include "basin/core/parallel/communicator.h"
#include "basin/core/parallel/grad_norm.h"
#include "basin/core/parallel/sharded_optimizer.h"

namespace basin {

namespace {

std::map<std::string, double> sam_extras(const SAMOptions& options) {
  return {{"rho", options.rho}, {"eta", options.eta}};
}

}  // namespace

double SAMOptimizer::GroupView::get(const std::string& name) const { return get_hyperparameter(*options, name); }

SAMOptimizer::SAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options)
    : Optimizer(GroupSync(sam_extras(options)).mirror_groups(*base),
                GroupSync(sam_extras(options)).mirror_defaults(*base)),
      base_(std::move(base)),
      options_(options),
      sync_(sam_extras(options)) {
  if (!(options_.rho >= 0)) throw std::invalid_argument("SAM: rho must be >= 0");
  if (!(options_.epsilon >= 0)) throw std::invalid_argument("SAM: epsilon must be >= 0");
  if (options_.interval < 1) throw std::invalid_argument("SAM: interval must be >= 1");
  if (options_.parts < 1) throw std::invalid_argument("SAM: parts must be >= 1");
  if (dynamic_cast<SAMOptimizer*>(base_.get()) != nullptr) {
    throw std::invalid_argument("SAM: the base optimizer is already a SAMOptimizer");
  }
  sync_.start(*this, *base_);
}

void SAMOptimizer::sync_param_groups() { sync_.sync(*this, *base_); }

std::vector<SAMOptimizer::GroupView> SAMOptimizer::views(bool perturbed_only, bool with_grads) {
  std::vector<GroupView> groups;
  // A tensor listed twice (tied weights, or in two groups) is perturbed, normed and restored once.
  std::unordered_set<const c10::TensorImpl*> seen;
  for (auto& group : param_groups_) {
    GroupView view{{}, {}, &group.options()};
    for (const auto& p : group.params()) {
      if (!p.requires_grad() || (with_grads && !p.grad().defined()) || (perturbed_only && !perturbs(p)) ||
          !seen.insert(p.unsafeGetTensorImpl()).second) {
        continue;
      }
      view.params.push_back(p);
      if (with_grads) view.grads.push_back(p.grad());
    }
    groups.push_back(std::move(view));
  }
  return groups;
}

std::vector<SAMOptimizer::GroupView> SAMOptimizer::groups_with_grads(bool perturbed_only) {
  return views(perturbed_only, /*with_grads=*/true);
}

std::vector<SAMOptimizer::GroupView> SAMOptimizer::parameter_groups(bool perturbed_only) {
  return views(perturbed_only, /*with_grads=*/false);
}

std::vector<at::Tensor> SAMOptimizer::parameters_of(const std::vector<GroupView>& groups) {
  std::vector<at::Tensor> params;
  for (const auto& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
  return params;
}

ShardedParameters* SAMOptimizer::shards() const { return dynamic_cast<ShardedParameters*>(base_.get()); }

bool SAMOptimizer::owns(const at::Tensor& param) const { return shards() == nullptr || shards()->owns(param); }

at::Tensor SAMOptimizer::sum_over_shards(const at::Tensor& partial) {
  if (shards() == nullptr) return partial;
  std::vector<at::Tensor> sums{partial.clone()};
  shards()->communicator().all_reduce_sum(sums);
  return sums.front();
}

void SAMOptimizer::scale_to_rho(std::vector<Perturbation>& perturbation, const std::vector<GroupView>& groups,
                                const std::vector<at::Tensor>& normed, const std::vector<at::Tensor>& params) {
  // Averaged gradients are the same on every rank: under ZeRO-1 each rank
  // norms its own shard and one all-reduce adds them up.
  last_grad_norm_ = shards() != nullptr && options_.sync_ascent ? global_norm_over_shards(normed, params, *shards())
                                                                : global_norm(normed);
  const double norm = last_grad_norm_.item<double>();
  if (norm == 0) return;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (!groups[k].params.empty()) perturbation[k].scale = groups[k].get("rho") / (norm + options_.epsilon);
  }
}

at::Tensor SAMOptimizer::run_pass(Pass pass, const LossClosure& closure, PassRequest request) {
  pass_ = pass;
  request.part = pass == Pass::kPlain ? 0 : part_;
  request.parts = pass == Pass::kPlain ? 1 : options_.parts;
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

void SAMOptimizer::before_base_step() {
  for (auto& h : hooks_) {
    if (h.before_base_step) h.before_base_step();
  }
}

void SAMOptimizer::skip_step() {
  ++skipped_steps_;
  zero_grad();
}

at::Tensor SAMOptimizer::plain_step(const LossClosure& closure) {
  at::Tensor loss = run_pass(Pass::kPlain, closure);
  if (gradients_finite(Pass::kPlain)) {
    before_base_step();
    base_->step();
  } else {
    skip_step();
  }
  return loss;
}

void SAMOptimizer::move_to_perturbed(const std::vector<GroupView>& groups,
                                     const std::vector<Perturbation>& perturbation) {
  // Everything is checked before the first swap, so a bad perturbation leaves w as it was.
  if (perturbation.size() != groups.size()) {
    throw std::logic_error("SAM: perturbation() returned " + std::to_string(perturbation.size()) + " groups for " +
                           std::to_string(groups.size()));
  }
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (perturbation[k].scale != 0 && perturbation[k].directions.size() != groups[k].params.size()) {
      throw std::logic_error("SAM: perturbation() gave " + std::to_string(perturbation[k].directions.size()) +
                             " directions for the " + std::to_string(groups[k].params.size()) + " parameters of group " +
                             std::to_string(k));
    }
  }
  std::vector<at::Tensor> own;
  for (const auto& g : groups) {
    for (const auto& p : g.params) {
      if (owns(p)) own.push_back(p);
    }
  }
  perturbed_.match(own);
  std::size_t b = 0;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    for (std::size_t j = 0; j < groups[k].params.size(); ++j) {
      at::Tensor param = groups[k].params[j];
      const bool mine = owns(param);
      if (perturbation[k].scale != 0) {
        if (mine) {
          at::Tensor& buffer = perturbed_.buffers()[b];
          at::add_out(buffer, param, perturbation[k].directions[j], perturbation[k].scale);
          // The parameter takes the buffer's storage; its own storage, holding w,
          // is set aside untouched until it is swapped back. No copy either way.
          swapped_.emplace_back(param, param.data());
          param.set_data(buffer);
        } else {
          param.add_(perturbation[k].directions[j], perturbation[k].scale);
        }
      }
      if (mine) ++b;
    }
  }
}

void SAMOptimizer::restore_weights(bool base_step_follows, bool collectives_allowed) {
  for (auto it = swapped_.rbegin(); it != swapped_.rend(); ++it) it->first.set_data(it->second);
  swapped_.clear();
  // Under ZeRO-1 the skip decision is agreed by every rank, so every rank
  // (whether or not it perturbed anything) joins the owners' broadcast.
  if (shards() != nullptr && !base_step_follows && collectives_allowed) shards()->broadcast_parameters();
}

std::vector<SAMOptimizer::Perturbation> SAMOptimizer::perturbation(std::vector<GroupView>& groups) {
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> normed;  // what the norm is taken over: g, or T * g for ASAM
  std::vector<at::Tensor> normed_params;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    auto& g = groups[k];
    if (g.params.empty()) continue;
    normed_params.insert(normed_params.end(), g.params.begin(), g.params.end());
    if (options_.adaptive) {
      auto t = at::_foreach_abs(g.params);
      at::_foreach_add_(t, g.get("eta"));
      for (std::size_t j = 0; j < t.size(); ++j) {
        if (unscaled_.count(g.params[j].unsafeGetTensorImpl()) != 0) t[j].fill_(1);
      }
      auto tg = at::_foreach_mul(t, g.grads);
      normed.insert(normed.end(), tg.begin(), tg.end());
      at::_foreach_mul_(t, tg);  // the direction is T^2 g
      result[k].directions = std::move(t);
    } else {
      normed.insert(normed.end(), g.grads.begin(), g.grads.end());
      result[k].directions = g.grads;
    }
  }
  scale_to_rho(result, groups, normed, normed_params);
  return result;
}

at::Tensor SAMOptimizer::step(LossClosure closure) {
  sync_param_groups();
  if (!closure) {
    base_->step();
    return {};
  }
  // Plain steps before `start` (late-phase SAM), then a SAM step every `interval`.
  const bool sam_step = steps_ >= options_.start && (steps_ - options_.start) % options_.interval == 0;
  ++steps_;
  if (!sam_step) return plain_step(closure);
  if (perturbs_before_pass()) return one_pass_step(closure);

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
    // Each part's closure gave its part's mean loss: the batch's is their mean.
    at::NoGradGuard no_grad;
    const double parts = static_cast<double>(options_.parts);
    for (auto& [param, sum] : summed_descent_) {
      at::Tensor& grad = param.mutable_grad();
      if (grad.defined()) {
        grad.copy_(sum).div_(parts);
      } else {
        grad = sum.div_(parts);
      }
    }
    loss = loss / parts;
  }
  auto descent = groups_with_grads();
  if (descended) adjust_descent_gradients(descent);
  before_base_step();
  base_->step();
  after_base_step();
  return loss;
}

at::Tensor SAMOptimizer::one_pass_step(const LossClosure& closure) {
  auto groups = parameter_groups(/*perturbed_only=*/true);
  at::Tensor loss;
  bool finite = false;
  try {
    {
      at::NoGradGuard no_grad;
      const auto perturbation = perturbation_before_pass(groups);
      move_to_perturbed(groups, perturbation);
      for (const auto& p : perturbation) {
        if (p.scale != 0) {
          ++sam_steps_;  // at a perturbed point (Momentum-SAM's first step has no momentum yet)
          break;
        }
      }
    }
    loss = run_pass(Pass::kPlain, closure);
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
  before_base_step();
  base_->step();
  after_base_step();
  return loss;
}

at::Tensor SAMOptimizer::forward_at_current_weights(const LossClosure& closure) {
  PassRequest forward_only;
  forward_only.backward = false;
  forward_only.per_sample_losses = true;
  return run_pass(Pass::kDescent, closure, forward_only);
}

bool SAMOptimizer::sam_part(const LossClosure& closure, at::Tensor& loss, bool& descended) {
  PassRequest ascent;
  ascent.per_sample_losses = wants_ascent_sample_losses();
  at::Tensor part_loss;
  before_ascent();
  try {
    part_loss = run_pass(Pass::kAscent, closure, ascent);
  } catch (...) {
    after_ascent();
    throw;
  }
  after_ascent();
  at::Tensor ascent_losses;
  if (ascent.per_sample_losses) {
    if (part_loss.dim() != 1 || part_loss.numel() == 0) {
      throw std::logic_error("SAM: the closure returned a loss of " + std::to_string(part_loss.dim()) +
                             " dimensions where each sample's loss was asked for (request().per_sample_losses)");
    }
    ascent_losses = part_loss;
    part_loss = part_loss.mean();
  }
  loss = loss.defined() ? loss + part_loss : part_loss;
  if (!gradients_finite(Pass::kAscent)) return false;  // nothing is perturbed now
  if (options_.parts == 1) {
    auto all = groups_with_grads();
    descended = descend(all);
    if (!descended) return true;  // the base steps with the ascent gradients as descend() left them
  }
  if (part_ == 0) ++sam_steps_;
  auto groups = groups_with_grads(/*perturbed_only=*/true);
  bool finite = false;
  try {
    {
      at::NoGradGuard no_grad;
      move_to_perturbed(groups, perturbation(groups));
    }
    PassRequest descent;
    descent.samples = descent_samples(ascent_losses, closure);
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
  if (!finite || options_.parts == 1) return finite;
  // Summed by parameter: a part may leave a parameter without a gradient.
  at::NoGradGuard no_grad;
  for (const auto& g : groups_with_grads()) {
    for (std::size_t j = 0; j < g.params.size(); ++j) {
      const auto [found, added] = summed_index_.emplace(g.params[j].unsafeGetTensorImpl(), summed_descent_.size());
      if (added) {
        summed_descent_.emplace_back(g.params[j], g.grads[j].clone());
      } else {
        summed_descent_[found->second].second.add_(g.grads[j]);
      }
    }
  }
  return true;
}

ParameterStates SAMOptimizer::parameter_states(const ParameterNumbering& numbering) {
  return basin::parameter_states(*base_, numbering);
}

void SAMOptimizer::load_parameter_states(const ParameterStates& states, const ParameterNumbering& numbering) {
  basin::load_parameter_states(*base_, states, numbering);
}

StateDict SAMOptimizer::counters() const {
  StateDict counters = new_state_dict();
  counters.insert("steps", steps_);
  counters.insert("sam_steps", sam_steps_);
  counters.insert("skipped_steps", skipped_steps_);
  return counters;
}

void SAMOptimizer::load_counters(const StateDict& counters) {
  for (const char* name : {"steps", "sam_steps", "skipped_steps"}) {
    if (!counters.contains(name) || !counters.at(name).isInt()) {
      throw std::invalid_argument(std::string("SAM state has no integer '") + name + "'");
    }
  }
  steps_ = counters.at("steps").toInt();
  sam_steps_ = counters.at("sam_steps").toInt();
  skipped_steps_ = counters.at("skipped_steps").toInt();
}

void SAMOptimizer::save(torch::serialize::OutputArchive& archive) const {
  // Values set on the base since the last step are saved too: agree first.
  const_cast<SAMOptimizer*>(this)->sync_param_groups();
  torch::serialize::OutputArchive base_archive;
  base_->save(base_archive);
  archive.write("base", base_archive);
  archive.write("steps", at::tensor(steps_, at::kLong));
  archive.write("sam_steps", at::tensor(sam_steps_, at::kLong));
  archive.write("skipped_steps", at::tensor(skipped_steps_, at::kLong));
  archive.write("groups", at::tensor(static_cast<int64_t>(param_groups_.size()), at::kLong));
  for (std::size_t i = 0; i < param_groups_.size(); ++i) {
    for (const auto& name : hyperparameter_names(param_groups_[i].options())) {
      archive.write("group/" + std::to_string(i) + "/" + name,
                    at::tensor(get_hyperparameter(param_groups_[i].options(), name), at::kDouble));
    }
  }
}

void SAMOptimizer::load(torch::serialize::InputArchive& archive) {
  sync_param_groups();  // groups added on either side exist on both before values are written
  torch::serialize::InputArchive base_archive;
  archive.read("base", base_archive);
  base_->load(base_archive);
  // A fresh tensor per key: reading into a defined tensor keeps its dtype.
  auto read = [&archive](const std::string& key) {
    at::Tensor value;
    archive.read(key, value);
    return value;
  };
  steps_ = read("steps").item<int64_t>();
  sam_steps_ = read("sam_steps").item<int64_t>();
  skipped_steps_ = read("skipped_steps").item<int64_t>();
  const int64_t groups = read("groups").item<int64_t>();
  if (groups != static_cast<int64_t>(param_groups_.size())) {
    throw std::runtime_error("SAM checkpoint has " + std::to_string(groups) + " param groups, this optimizer " +
                             std::to_string(param_groups_.size()));
  }
  // Group values go to both sides, then the sync records them as agreed.
  for (std::size_t i = 0; i < param_groups_.size(); ++i) {
    for (const auto& name : hyperparameter_names(param_groups_[i].options())) {
      const double value = read("group/" + std::to_string(i) + "/" + name).item<double>();
      set_hyperparameter(param_groups_[i].options(), name, value);
      if (has_hyperparameter(base_->param_groups()[i].options(), name)) {
        set_hyperparameter(base_->param_groups()[i].options(), name, value);
      }
    }
  }
  sync_.start(*this, *base_);
}

}  // namespace basin
