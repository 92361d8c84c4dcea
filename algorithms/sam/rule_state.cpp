#include "basin/algorithms/sam/rule_state.h"

#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>

namespace basin {

void ParameterBuffers::save(ParameterStates& states, const ParameterNumbering& numbering) const {
  const auto& params = numbering.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto found = buffers_.find(params[i].unsafeGetTensorImpl());
    if (found == buffers_.end() || !found->second.defined()) continue;
    const int64_t index = static_cast<int64_t>(i);
    StateDict entry = states.contains(index) ? states.at(index).toGenericDict() : new_state_dict();
    entry.insert_or_assign(name_, found->second.detach().to(at::kCPU).clone());
    states.insert_or_assign(index, entry);
  }
}

void ParameterBuffers::load(const ParameterStates& states, const ParameterNumbering& numbering) {
  buffers_.clear();
  const auto& params = numbering.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int64_t index = static_cast<int64_t>(i);
    if (!states.contains(index) || !states.at(index).isGenericDict()) continue;
    const StateDict entry = states.at(index).toGenericDict();
    if (!entry.contains(name_)) continue;
    const c10::IValue& saved = entry.at(name_);
    if (!saved.isTensor() || saved.toTensor().sizes() != params[i].sizes()) {
      std::ostringstream message;
      message << "SAM state: '" << name_ << "' of parameter " << index << " is not a tensor of shape "
              << params[i].sizes();
      throw std::invalid_argument(message.str());
    }
    buffers_[params[i].unsafeGetTensorImpl()] = saved.toTensor().to(params[i].device(), params[i].scalar_type()).clone();
  }
}

ParameterStates RuleState::parameters(const ParameterNumbering& numbering) const {
  ParameterStates states = new_parameter_states();
  for (const ParameterBuffers* buffers : buffers_) buffers->save(states, numbering);
  return states;
}

void RuleState::load_parameters(const ParameterStates& states, const ParameterNumbering& numbering) {
  for (ParameterBuffers* buffers : buffers_) buffers->load(states, numbering);
}

StateDict RuleState::values() const {
  StateDict values = new_state_dict();
  for (const auto& [name, value] : counts_) values.insert(name, *value);
  for (const auto& [name, value] : numbers_) values.insert(name, *value);
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
  for (const auto& [name, value] : counts_) *value = values.at(name).toInt();
  for (const auto& [name, value] : numbers_) *value = values.at(name).toDouble();
}

}  // namespace basin
