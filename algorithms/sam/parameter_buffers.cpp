#include "basin/algorithms/sam/parameter_buffers.h"

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

}  // namespace basin
