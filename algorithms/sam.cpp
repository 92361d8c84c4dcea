#include "basin/algorithms/sam.h"

#include <torch/nn/module.h>

#include "basin/core/hyperparameters.h"
#include "basin/core/logger.h"

namespace basin {

SAM::SAM(Params& params) {
  const Json rho = params.raw("rho");
  if (rho.is_array()) {
    group_rho_ = params.numbers("rho", {});
    for (double r : group_rho_) {
      if (!(r >= 0)) params.fail("rho", "a number > 0 or a list of numbers >= 0, one per param group", rho);
    }
    if (group_rho_.empty()) params.fail("rho", "a non-empty list", rho);
    options_.rho = group_rho_.front();
  } else {
    options_.rho = params.positive("rho", 0.05);
  }
  options_.epsilon = params.number("epsilon", 1e-12, 0);
  options_.adaptive = params.boolean("adaptive", false);
  options_.eta = params.number("eta", 0.01, 0);
  options_.interval = params.integer("interval", 1, 1);
  sync_ascent_ = params.boolean("sync_ascent", false);
  options_.sync_ascent = sync_ascent_;
  freeze_running_stats_ = params.boolean("freeze_running_stats", true);
}

bool SAM::match(Event event, const State& state) const {
  // Exactly once, and never around an optimizer that already is SAM.
  return event == Event::AFTER_SHARDING && optimizer_ == nullptr &&
         dynamic_cast<const SAMOptimizer*>(state.optimizer.get()) == nullptr;
}

std::shared_ptr<SAMOptimizer> SAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                  const SAMOptions& options) {
  return std::make_shared<SAMOptimizer>(std::move(base), options);
}

void SAM::apply(Event /*event*/, State& state, Logger& /*logger*/) { wrap(state); }

void SAM::wrap(State& state) {
  if (!state.optimizer) throw std::logic_error("the state has no optimizer to wrap");
  optimizer_ = make_optimizer(state.optimizer, options_);
  auto& groups = optimizer_->param_groups();
  if (!group_rho_.empty()) {
    if (group_rho_.size() != groups.size()) {
      throw ConfigError("config key 'algorithms.sam.rho': " + std::to_string(group_rho_.size()) +
                        " values for " + std::to_string(groups.size()) + " param groups");
    }
    for (std::size_t i = 0; i < groups.size(); ++i) set_hyperparameter(groups[i].options(), "rho", group_rho_[i]);
  }
  State* s = &state;
  PassHooks hooks;
  hooks.before_pass = [this, s](Pass pass) {
    s->pass = pass;
    // Rank-local ascent (the paper's m-sharpness): no gradient sync in this
    // pass; an enclosing NoGradientSync scope keeps every pass local.
    outer_skip_gradient_sync_ = s->skip_gradient_sync;
    s->skip_gradient_sync = outer_skip_gradient_sync_ || (pass == Pass::kAscent && !sync_ascent_);
    if (pass == Pass::kDescent && freeze_running_stats_ && s->model) running_stats_.take(*s->model);
  };
  hooks.after_pass = [this, s](Pass pass) {
    if (pass == Pass::kDescent && freeze_running_stats_ && s->model) running_stats_.restore();
    s->pass = Pass::kPlain;
    s->skip_gradient_sync = outer_skip_gradient_sync_;
  };
  optimizer_->add_pass_hooks(std::move(hooks));
  state.optimizer = optimizer_;
}

StateDict SAM::state_dict() const {
  StateDict state = new_state_dict();
  if (optimizer_) state.insert("optimizer", optimizer_->counters());
  return state;
}

void SAM::load_state_dict(const StateDict& state) {
  if (!optimizer_) throw std::logic_error("SAM state loads after AFTER_SHARDING, once the optimizer is wrapped");
  if (!state.contains("optimizer") || !state.at("optimizer").isGenericDict()) {
    throw std::invalid_argument("SAM state has no 'optimizer' counters");
  }
  optimizer_->load_counters(state.at("optimizer").toGenericDict());
}

BASIN_REGISTER(algorithm_registry(), "sam", SAM);

}  // namespace basin
