#include "basin/algorithms/loss/mesa.h"

#include <stdexcept>

#include <unordered_set>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/nn/module.h>

#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

MESA::MESA(Params& params) : TrajectoryLoss(params, 0.8), loaded_(new_state_dict()) {
  decay_ = params.number("decay", 0.9998, 0, 1);
  if (decay_ >= 1) params.fail("decay", "a number in [0, 1)", Json(decay_));
}

bool MESA::match(Event event, const State& state) const {
  switch (event) {
    case Event::INIT: return !state.outputs_given || state.outputs_per_token;  // refused there
    case Event::AFTER_SHARDING: return state.model && holds_rows_of(state.shards, *state.model);  // refused there
    case Event::FIT_START:
    case Event::AFTER_STEP: return true;
    // Not in a forward alone (ESAM's), whose loss no gradient comes from.
    case Event::BEFORE_FORWARD:
    case Event::AFTER_LOSS: return active(state) && state.request.backward;
    default: return false;
  }
}

void MESA::apply(Event event, State& state, Logger& /*logger*/) {
  switch (event) {
    case Event::INIT: require_outputs(state); break;
    case Event::AFTER_SHARDING:
      throw ConfigError("config key 'algorithms.mesa': not where ranks hold rows of the parameters only" +
                        (state.parallel_mode.empty() ? "" : " (parallel.mode " + state.parallel_mode + ")") +
                        ": its teacher (the moving average of the whole model, swapped in for a forward) would need "
                        "every parameter whole on every rank; use zero2");
    case Event::FIT_START: start(state); break;
    case Event::BEFORE_FORWARD: reference_forward(state); break;
    case Event::AFTER_LOSS:
      if (!reference_.defined()) throw std::logic_error("mesa: AFTER_LOSS without its BEFORE_FORWARD");
      add_term(state, reference_);
      reference_ = at::Tensor();
      break;
    case Event::AFTER_STEP: update_averages(); break;
    default: break;
  }
}

std::vector<std::pair<std::string, at::Tensor>> MESA::named_tensors() const {
  // A tensor shared by two names (tied weights) is averaged and swapped once.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::unordered_set<const c10::TensorImpl*> seen;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    if (seen.insert(t.unsafeGetTensorImpl()).second) tensors.emplace_back(name, t);
  };
  for (const auto& item : model_->named_parameters(true)) add(item.key(), item.value());
  for (const auto& item : model_->named_buffers(true)) add(item.key(), item.value());
  return tensors;
}

std::vector<at::Tensor> MESA::live_tensors() const {
  std::vector<at::Tensor> tensors;
  for (const auto& [name, t] : named_tensors()) tensors.push_back(t);
  return tensors;
}

std::vector<std::string> MESA::names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : named_tensors()) names.push_back(name);
  return names;
}

void MESA::start(State& state) {
  if (!state.model || !state.forward) throw std::runtime_error("mesa needs the state's model and forward");
  if (model_) return;  // a second fit continues the averages
  model_ = state.model;
  const auto live = live_tensors();
  const auto keys = names();
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (loaded_.contains(keys[i])) {
      const at::Tensor saved = loaded_.at(keys[i]).toTensor();
      if (saved.sizes() != live[i].sizes()) {
        throw std::invalid_argument("MESA state: the average of '" + keys[i] + "' has another shape than the model's");
      }
      averages_.push_back(saved.to(live[i].device(), live[i].scalar_type()).clone());
    } else if (loaded_.size() > 0) {
      throw std::invalid_argument("MESA state has no average of '" + keys[i] + "'");
    } else {
      averages_.push_back(live[i].detach().clone());
    }
  }
  loaded_ = new_state_dict();
}

void MESA::reference_forward(State& state) {
  if (!model_) throw std::logic_error("mesa: FIT_START has not run (a hand-written loop runs it before the first step)");
  // The averaged tensors take the model's place for one forward without
  // gradient, in evaluation mode; then everything is swapped back untouched.
  const auto live = live_tensors();
  std::vector<at::Tensor> own;
  own.reserve(live.size());
  std::vector<std::pair<torch::nn::Module*, bool>> modes;  // each module's own flag (a frozen BatchNorm stays frozen)
  for (const auto& m : model_->modules(/*include_self=*/true)) modes.emplace_back(m.get(), m->is_training());
  // Under autocast a weight's low-precision copy is cached by tensor: the
  // averages' copies must not be the ones the model's own forward finds next.
  const bool cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < live.size(); ++i) {
    own.push_back(live[i].data());
    at::Tensor(live[i]).set_data(averages_[i]);
  }
  auto restore = [&] {
    for (const auto& [module, training] : modes) module->train(training);  // parents first: children win
    for (std::size_t i = live.size(); i-- > 0;) at::Tensor(live[i]).set_data(own[i]);
    at::autocast::set_autocast_cache_enabled(cache);
  };
  try {
    model_->eval();
    reference_ = state.forward(state.microbatch.inputs).detach();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

void MESA::update_averages() {
  if (!model_) return;
  at::NoGradGuard no_grad;
  const auto live = live_tensors();
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (at::isFloatingType(averages_[i].scalar_type())) {
      averages_[i].lerp_(live[i].detach(), 1 - decay_);
    } else {
      averages_[i].copy_(live[i]);
    }
  }
}

StateDict MESA::state_dict() const {
  StateDict state = new_state_dict();
  if (!model_) return loaded_.size() > 0 ? loaded_.copy() : state;
  const auto keys = names();
  for (std::size_t i = 0; i < averages_.size(); ++i) state.insert(keys[i], averages_[i].cpu());
  return state;
}

void MESA::load_state_dict(const StateDict& state) {
  for (const auto& item : state) {
    if (!item.value().isTensor()) {
      throw std::invalid_argument("MESA state: '" + item.key().toStringRef() + "' is not a tensor");
    }
  }
  if (!model_) {
    loaded_ = state.copy();
    return;
  }
  const auto keys = names();
  for (std::size_t i = 0; i < averages_.size(); ++i) {
    if (!state.contains(keys[i])) throw std::invalid_argument("MESA state has no average of '" + keys[i] + "'");
    averages_[i].copy_(state.at(keys[i]).toTensor());
  }
}

BASIN_REGISTER(algorithm_registry(), "mesa", MESA);

}  // namespace basin
