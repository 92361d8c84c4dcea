#include "basin/algorithms/mesa.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace basin {

MESA::MESA(Params& params) : TrajectoryLoss(params, 0.8), loaded_(new_state_dict()) {
  decay_ = params.number("decay", 0.9998, 0, 1);
  if (decay_ >= 1) params.fail("decay", "a number in [0, 1)", Json(decay_));
}

bool MESA::match(Event event, const State& state) const {
  switch (event) {
    case Event::FIT_START:
    case Event::AFTER_STEP: return true;
    case Event::BEFORE_FORWARD:
    case Event::AFTER_LOSS: return active(state);
    default: return false;
  }
}

void MESA::apply(Event event, State& state, Logger& /*logger*/) {
  switch (event) {
    case Event::FIT_START: start(state); break;
    case Event::BEFORE_FORWARD: reference_forward(state); break;
    case Event::AFTER_LOSS: add_term(state, reference_); break;
    case Event::AFTER_STEP: update_averages(); break;
    default: break;
  }
}

std::vector<at::Tensor> MESA::live_tensors() const {
  std::vector<at::Tensor> tensors = model_->parameters(true);
  for (const auto& b : model_->buffers(true)) tensors.push_back(b);
  return tensors;
}

std::vector<std::string> MESA::names() const {
  std::vector<std::string> names;
  for (const auto& item : model_->named_parameters(true)) names.push_back(item.key());
  for (const auto& item : model_->named_buffers(true)) names.push_back(item.key());
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
  // The averaged tensors take the model's place for one forward without
  // gradient, in evaluation mode; then everything is swapped back untouched.
  const auto live = live_tensors();
  std::vector<at::Tensor> own;
  own.reserve(live.size());
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < live.size(); ++i) {
    own.push_back(live[i].data());
    at::Tensor(live[i]).set_data(averages_[i]);
  }
  const bool training = model_->is_training();
  auto restore = [&] {
    model_->train(training);
    for (std::size_t i = 0; i < live.size(); ++i) at::Tensor(live[i]).set_data(own[i]);
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
