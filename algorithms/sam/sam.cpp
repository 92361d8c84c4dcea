#include "basin/algorithms/sam/sam.h"

#include <algorithm>
#include <cmath>
#include <regex>
#include <stdexcept>

#include <ATen/ATen.h>

#include <torch/nn/module.h>

#include "basin/algorithms/sam/sam_registry.h"
#include "basin/core/engine/logger.h"
#include "basin/core/optim/hyperparameters.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

// The family's registry is defined with its element type, SAM, which it must see whole.
Registry<SAM>& sam_family_registry() {
  static Registry<SAM> registry("SAM-family algorithm");
  return registry;
}

SAM::SAM(Params& params, const SAMDefaults& defaults) : path_(params.path()) {
  const Json rho = params.raw("rho");
  if (rho.is_array()) {
    group_rho_ = params.numbers("rho", {});
    for (double r : group_rho_) {
      if (!(r >= 0)) params.fail("rho", "a number > 0 or a list of numbers >= 0, one per param group", rho);
    }
    if (group_rho_.empty()) params.fail("rho", "a non-empty list", rho);
    options_.rho = group_rho_.front();
  } else {
    options_.rho = params.positive("rho", defaults.rho);
  }
  options_.epsilon = params.number("epsilon", defaults.epsilon, 0);
  adaptive_ = params.boolean("adaptive", defaults.is_adaptive);
  options_.eta = params.number("eta", defaults.eta, 0);
  options_.interval = params.integer("interval", 1, 1);
  sync_ascent_given_ = params.has("sync_ascent");
  options_.sync_ascent = params.boolean("sync_ascent", defaults.sync_ascent);
  freeze_running_stats_ = params.boolean("freeze_running_stats", true);
  const Json start = params.raw("start");
  if (start.is_number_integer() && start.get<int64_t>() >= 0) {
    options_.start = start.get<int64_t>();
  } else if (start.is_number() && start.get<double>() >= 0 && start.get<double>() < 1) {
    start_fraction_ = start.get<double>();
  } else if (!start.is_null()) {
    params.fail("start", "a step (an integer >= 0) or a fraction of the run (a number in [0, 1))", start);
  }
  perturb_ = params.string("perturb", "");
  try {
    std::regex check(perturb_);
  } catch (const std::regex_error& error) {
    params.fail("perturb", std::string("a regular expression over parameter names (") + error.what() + ")",
                Json(perturb_));
  }
}

bool SAM::match(Event event, const State& /*state*/) const {
  return event == Event::AFTER_SHARDING && !made_;  // exactly once
}

std::unordered_set<const c10::TensorImpl*> SAM::parameters_named(const torch::nn::Module& model,
                                                                 const std::string& pattern) {
  const std::regex regex(pattern);
  std::unordered_set<const c10::TensorImpl*> found;
  for (const auto& item : model.named_parameters(true)) {
    if (std::regex_search(item.key(), regex)) found.insert(item.value().unsafeGetTensorImpl());
  }
  return found;
}

std::vector<Perturbation> SAM::perturbation(StepView& step, std::vector<GroupView>& groups) {
  if (!adaptive_) return SAMRule::perturbation(step, groups);
  std::vector<Perturbation> result(groups.size());
  std::vector<at::Tensor> normed;  // T * g, whose norm scales e
  for (std::size_t k = 0; k < groups.size(); ++k) {
    auto& g = groups[k];
    if (g.params.empty()) continue;
    auto t = at::_foreach_abs(g.params);
    at::_foreach_add_(t, g.get("eta"));
    for (std::size_t j = 0; j < t.size(); ++j) {
      if (!scales(g.params[j])) t[j].fill_(1);
    }
    auto tg = at::_foreach_mul(t, g.grads);
    normed.insert(normed.end(), tg.begin(), tg.end());
    at::_foreach_mul_(t, tg);  // the direction is T^2 g
    result[k].directions = std::move(t);
  }
  step.scale_to_rho(result, groups, normed, parameters_of(groups), perturbation_ranks(step));
  return result;
}

std::shared_ptr<SAMRule> SAM::shared_rule() {
  // The step shares ownership of its rule: the algorithm must be made by
  // std::make_shared (as the registry and make_sam_optimizer make it).
  if (auto owner = weak_from_this().lock()) return owner;
  throw std::logic_error("SAM: " + name() + " is not owned by a std::shared_ptr (make it with std::make_shared), "
                         "and the step it makes must share its rule");
}

std::shared_ptr<SAMOptimizer> SAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base, const State& state) {
  if (!base) throw std::logic_error("SAM: there is no optimizer to wrap");
  if (made_) throw std::logic_error("SAM: " + name() + " made its step already; its rule's state serves one");
  const std::string synced_because = why_synced_ascent();
  if (state.world_size > 1 && !options_.sync_ascent && !synced_because.empty()) {
    throw ConfigError(key("sync_ascent") + ": false under data-parallel training, but " + name() + " " +
                      synced_because + "; set it to true");
  }
  SAMOptions options = options_;
  // The trainer's strategy says which shards the base steps; a hand loop's base may be a zero optimizer itself.
  ShardedParameters* shards = state.shards != nullptr ? state.shards : shards_of(*base);
  if (some_gradient_in_rows(shards, unique_parameters(*base))) {
    // Gradients in rows (zero3): no rank ever holds a whole gradient, so the ascent is synced.
    if (sync_ascent_given_ && !options.sync_ascent) {
      const std::string mode = state.parallel_mode.empty() ? "" : " (parallel.mode " + state.parallel_mode + ")";
      throw ConfigError(key("sync_ascent") + ": false where gradients are in rows" + mode + ", but a "
                        "rank-local ascent needs each rank's whole local gradient, and every gradient is "
                        "reduce-scattered to the ranks' rows as backward runs; set it to true (the default there) "
                        "or use zero2");
    }
    options.sync_ascent = true;
  }
  if (start_fraction_ > 0) {
    const int64_t run_length = RunFacts::of(state).run_length;
    if (run_length == 0) throw ConfigError(key("start") + ": a fraction of the run needs the run's length");
    options.start = std::llround(start_fraction_ * static_cast<double>(run_length));
  }
  auto step = std::make_shared<SAMOptimizer>(std::move(base), options, shared_rule(), shards);
  if (!perturb_.empty()) {
    if (!state.model) throw ConfigError(key("perturb") + ": there is no model whose parameter names it could match");
    const auto perturbed = parameters_named(*state.model, perturb_);
    if (perturbed.empty()) {
      std::string names;
      for (const auto& item : state.model->named_parameters(true)) names += (names.empty() ? "" : ", ") + item.key();
      throw ConfigError(key("perturb") + ": \"" + perturb_ + "\" matches no parameter name; the model has " + names);
    }
    std::unordered_set<const c10::TensorImpl*> unperturbed;
    for (const auto& p : state.model->parameters(true)) {
      if (perturbed.count(p.unsafeGetTensorImpl()) == 0) unperturbed.insert(step->view().listed_as(p));
    }
    step->set_unperturbed(std::move(unperturbed));
  }
  auto& groups = step->param_groups();
  if (!group_rho_.empty()) {
    if (group_rho_.size() != groups.size()) {
      throw ConfigError(key("rho") + ": " + std::to_string(group_rho_.size()) + " values for " +
                        std::to_string(groups.size()) + " param groups");
    }
    for (std::size_t i = 0; i < groups.size(); ++i) set_hyperparameter(groups[i].options(), "rho", group_rho_[i]);
  }
  prepare(step->view(), RunFacts::of(state));
  if (freeze_running_stats_ && state.model) {
    PassHooks freeze;  // the descent's forward must not count the batch again, at w + e
    auto model = state.model;
    freeze.before_pass = [this, model](Pass pass) {
      if (pass == Pass::kDescent) running_stats_.take(*model);
    };
    freeze.after_pass = [this](Pass pass) {
      if (pass == Pass::kDescent) running_stats_.restore();
    };
    step->add_pass_hooks(std::move(freeze));
  }
  made_ = true;
  step->set_made_by(path_);
  optimizer_ = step;
  return step;
}

void SAM::apply(Event /*event*/, State& state, Logger& /*logger*/) {
  // Two SAM-family algorithms would wrap one step twice, or (as before this check) the second would be silently
  // left out while its keys passed validation: neither is what a config naming both means.
  if (const auto* wrapped = dynamic_cast<const SAMOptimizer*>(state.optimizer.get())) {
    const std::string other = wrapped->made_by().empty() ? "a SAM step made by hand" : "'" + wrapped->made_by() + "'";
    throw ConfigError("config key '" + path_ + "': the optimizer is already wrapped in a SAM step by " + other +
                      "; a step takes one SAM-family algorithm, so name one of them in 'algorithms'");
  }
  state.optimizer = make_optimizer(state.optimizer, state);
  install_state_hooks(state);
}

void SAM::install_state_hooks(State& state) {
  State* s = &state;
  SAMOptimizer* step = optimizer().get();  // the hooks live in the step: it outlives them
  PassHooks hooks;
  hooks.before_pass = [this, s, step](Pass pass) {
    s->pass = pass;
    // The step's request, but an enclosing NoGradientSync scope keeps every pass local.
    outer_request_ = s->request;
    s->request = step->request();
    if (outer_request_.sync == GradientSync::kNone) s->request.sync = GradientSync::kNone;
  };
  hooks.after_pass = [this, s](Pass) {
    s->pass = Pass::kPlain;
    s->request = outer_request_;
  };
  step->add_pass_hooks(std::move(hooks));
}

StateDict SAM::state_dict() const {
  StateDict state = new_state_dict();
  if (auto step = optimizer()) {
    state.insert("optimizer", step->counters());
    state.insert("parameters", rule_state_.parameters(ParameterNumbering(*step), step->view()));
    state.insert("values", rule_state_.values());
  }
  return state;
}

void SAM::load_state_dict(const StateDict& state) {
  auto step = optimizer();
  if (!step) throw std::logic_error("SAM state loads after AFTER_SHARDING, once the optimizer is wrapped");
  if (!state.contains("optimizer") || !state.at("optimizer").isGenericDict()) {
    throw std::invalid_argument("SAM state has no 'optimizer' counters");
  }
  step->load_counters(state.at("optimizer").toGenericDict());
  if (state.contains("parameters")) {
    if (!state.at("parameters").isGenericDict()) throw std::invalid_argument("SAM state's 'parameters' is not a dict");
    rule_state_.load_parameters(state.at("parameters").toGenericDict(), ParameterNumbering(*step));
  }
  if (state.contains("values")) {
    if (!state.at("values").isGenericDict()) throw std::invalid_argument("SAM state's 'values' is not a dict");
    rule_state_.load_values(state.at("values").toGenericDict());
  }
}

BASIN_REGISTER_SAM("sam", SAM);

}  // namespace basin
