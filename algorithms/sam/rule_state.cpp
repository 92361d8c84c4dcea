#include "basin/algorithms/sam/rule_state.h"

#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/step_view.h"

namespace basin {

ParameterStates RuleState::parameters(const ParameterNumbering& numbering, StepView& step) const {
  // A buffer follows its parameter's gradient: where a synced gradient is
  // not whole on every rank, the owner's buffer is the one saved.
  const bool on_owners = step.gradients_on_owners();
  ParameterStates states = new_parameter_states();
  for (const ParameterBuffers* buffers : buffers_) {
    if (on_owners || (buffers->by_owners() && step.parameters_have_owners())) {
      buffers->save_from_owners(states, numbering, step);
    } else {
      buffers->save(states, numbering);
    }
  }
  return states;
}

void RuleState::load_parameters(const ParameterStates& states, const ParameterNumbering& numbering) {
  for (ParameterBuffers* buffers : buffers_) buffers->load(states, numbering);
}

StateDict RuleState::values() const {
  StateDict values = new_state_dict();
  for (const auto& [name, value] : counts_) values.insert(name, *value);
  for (const auto& [name, value] : numbers_) values.insert(name, *value);
  for (const auto& [name, value] : tensors_) values.insert(name, value->detach().cpu().clone());
  return values;
}

void RuleState::load_values(const StateDict& values) {
  // Every value is checked before any is taken: a bad entry changes nothing.
  for (const auto& [name, value] : counts_) {
    if (!values.contains(name) || !values.at(name).isInt()) {
      throw std::invalid_argument("SAM state has no integer '" + name + "'");
    }
  }
  for (const auto& [name, value] : numbers_) {
    if (!values.contains(name) || !values.at(name).isDouble()) {
      throw std::invalid_argument("SAM state has no number '" + name + "'");
    }
  }
  for (const auto& [name, value] : tensors_) {
    if (!values.contains(name) || !values.at(name).isTensor() || !values.at(name).toTensor().sizes().equals(value->sizes())) {
      throw std::invalid_argument("SAM state has no tensor '" + name + "' of shape " + c10::str(value->sizes()));
    }
  }
  for (const auto& [name, value] : counts_) *value = values.at(name).toInt();
  for (const auto& [name, value] : numbers_) *value = values.at(name).toDouble();
  at::NoGradGuard no_grad;
  for (const auto& [name, value] : tensors_) value->copy_(values.at(name).toTensor());
}

}  // namespace basin
