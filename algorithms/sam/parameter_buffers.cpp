#include "basin/algorithms/sam/parameter_buffers.h"

#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/step_view.h"

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

void ParameterBuffers::save_from_owners(ParameterStates& states, const ParameterNumbering& numbering,
                                        StepView& step) const {
  const auto& params = numbering.parameters();
  auto mine = [&](std::size_t i) -> const at::Tensor* {
    if (!step.owned_here(params[i])) return nullptr;
    const auto found = buffers_.find(params[i].unsafeGetTensorImpl());
    return found == buffers_.end() || !found->second.defined() ? nullptr : &found->second;
  };
  // Which parameters have a buffer on their owner: the same list on every rank.
  std::vector<float> held(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) held[i] = mine(i) != nullptr ? 1.0f : 0.0f;
  const at::Tensor anywhere = step.max(at::tensor(at::ArrayRef<float>(held)).to(step.device()), Ranks::kJob).cpu();
  std::vector<at::Tensor> listed, values;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (anywhere[static_cast<int64_t>(i)].item<float>() <= 0) continue;
    const at::Tensor* buffer = mine(i);
    listed.push_back(params[i]);
    values.push_back(buffer != nullptr ? buffer->detach().to(params[i].scalar_type()).contiguous().clone()
                                       : at::empty_like(params[i]));
  }
  step.broadcast_from_owners(listed, values);
  ParameterBuffers gathered(name_);
  for (std::size_t i = 0; i < listed.size(); ++i) gathered.of(listed[i]) = values[i];
  gathered.save(states, numbering);
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
