#include "basin/algorithms/sam.h"

#include <algorithm>
#include <cmath>
#include <regex>

#include <torch/nn/module.h>

#include "basin/core/hyperparameters.h"
#include "basin/core/logger.h"

namespace basin {

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
  options_.adaptive = params.boolean("adaptive", defaults.adaptive);
  options_.eta = params.number("eta", defaults.eta, 0);
  options_.interval = params.integer("interval", 1, 1);
  sync_ascent_ = params.boolean("sync_ascent", defaults.sync_ascent);
  options_.sync_ascent = sync_ascent_;
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

bool SAM::match(Event event, const State& state) const {
  // Exactly once, and never around an optimizer that already is SAM.
  return event == Event::AFTER_SHARDING && optimizer_ == nullptr &&
         dynamic_cast<const SAMOptimizer*>(state.optimizer.get()) == nullptr;
}

std::shared_ptr<SAMOptimizer> SAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                  const SAMOptions& options, const State& /*state*/) {
  return std::make_shared<SAMOptimizer>(std::move(base), options);
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

int64_t SAM::run_length(const State& state) {
  // As the trainer stops: at max_steps or at the end of max_epochs, whichever comes first.
  const int64_t by_epochs = state.steps_per_epoch * state.max_epochs;
  if (state.max_steps <= 0) return by_epochs;
  return by_epochs > 0 ? std::min(state.max_steps, by_epochs) : state.max_steps;
}

void SAM::apply(Event /*event*/, State& state, Logger& /*logger*/) { wrap(state); }

void SAM::wrap(State& state) {
  if (!state.optimizer) throw std::logic_error("the state has no optimizer to wrap");
  const std::string synced_because = why_synced_ascent();
  if (state.world_size > 1 && !sync_ascent_ && !synced_because.empty()) {
    throw ConfigError(key("sync_ascent") + ": false under data-parallel training, but " + name() + " " +
                      synced_because + "; set it to true");
  }
  if (start_fraction_ > 0) {
    if (run_length(state) == 0) throw ConfigError(key("start") + ": a fraction of the run needs the run's length");
    options_.start = std::llround(start_fraction_ * static_cast<double>(run_length(state)));
  }
  optimizer_ = make_optimizer(state.optimizer, options_, state);
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
      if (perturbed.count(p.unsafeGetTensorImpl()) == 0) unperturbed.insert(p.unsafeGetTensorImpl());
    }
    optimizer_->set_unperturbed(std::move(unperturbed));
  }
  auto& groups = optimizer_->param_groups();
  if (!group_rho_.empty()) {
    if (group_rho_.size() != groups.size()) {
      throw ConfigError(key("rho") + ": " + std::to_string(group_rho_.size()) + " values for " +
                        std::to_string(groups.size()) + " param groups");
    }
    for (std::size_t i = 0; i < groups.size(); ++i) set_hyperparameter(groups[i].options(), "rho", group_rho_[i]);
  }
  State* s = &state;
  PassHooks hooks;
  hooks.before_pass = [this, s](Pass pass) {
    s->pass = pass;
    s->request = optimizer_->request();
    // Rank-local ascent (the paper's m-sharpness): no gradient sync in this
    // pass; an enclosing NoGradientSync scope keeps every pass local.
    outer_skip_gradient_sync_ = s->skip_gradient_sync;
    s->skip_gradient_sync = outer_skip_gradient_sync_ || (pass == Pass::kAscent && !sync_ascent_);
    if (pass == Pass::kDescent && freeze_running_stats_ && s->model) running_stats_.take(*s->model);
  };
  hooks.after_pass = [this, s](Pass pass) {
    if (pass == Pass::kDescent && freeze_running_stats_ && s->model) running_stats_.restore();
    s->pass = Pass::kPlain;
    s->request = PassRequest{};
    s->skip_gradient_sync = outer_skip_gradient_sync_;
  };
  optimizer_->add_pass_hooks(std::move(hooks));
  state.optimizer = optimizer_;
}

StateDict SAM::state_dict() const {
  StateDict state = new_state_dict();
  if (optimizer_) {
    state.insert("optimizer", optimizer_->counters());
    state.insert("parameters", optimizer_->variant_states(ParameterNumbering(*optimizer_)));
    state.insert("values", optimizer_->variant_values());
  }
  return state;
}

void SAM::load_state_dict(const StateDict& state) {
  if (!optimizer_) throw std::logic_error("SAM state loads after AFTER_SHARDING, once the optimizer is wrapped");
  if (!state.contains("optimizer") || !state.at("optimizer").isGenericDict()) {
    throw std::invalid_argument("SAM state has no 'optimizer' counters");
  }
  optimizer_->load_counters(state.at("optimizer").toGenericDict());
  if (state.contains("parameters")) {
    if (!state.at("parameters").isGenericDict()) throw std::invalid_argument("SAM state's 'parameters' is not a dict");
    optimizer_->load_variant_states(state.at("parameters").toGenericDict(), ParameterNumbering(*optimizer_));
  }
  if (state.contains("values")) {
    if (!state.at("values").isGenericDict()) throw std::invalid_argument("SAM state's 'values' is not a dict");
    optimizer_->load_variant_values(state.at("values").toGenericDict());
  }
}

BASIN_REGISTER(algorithm_registry(), "sam", SAM);

}  // namespace basin
