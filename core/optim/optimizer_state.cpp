#include "basin/core/optim/optimizer_state.h"

#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <type_traits>
#include <utility>

#include <ATen/ATen.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "basin/core/optim/hyperparameters.h"

namespace basin {

namespace {

// A template, so that the branch of the other LibTorch is discarded.
template <class Key>
Key state_key_of(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

}  // namespace

OptimizerStateKey optimizer_state_key(const at::Tensor& param) { return state_key_of<OptimizerStateKey>(param); }

namespace {

using torch::optim::Optimizer;

std::string describe(int64_t index) { return "parameter " + std::to_string(index); }

// Saved tensors live on the CPU, so a checkpoint opens on any machine.
at::Tensor to_cpu(const at::Tensor& tensor) { return tensor.cpu(); }

// A copy on the parameter's device: the restored state never aliases the dict.
at::Tensor restored(const StateDict& entry, const char* name, const at::Tensor& param, int64_t index) {
  if (!entry.contains(name) || !entry.at(name).isTensor()) {
    throw std::invalid_argument("optimizer state of " + describe(index) + " has no tensor '" + name +
                                "' (was it saved by another kind of optimizer?)");
  }
  const at::Tensor value = entry.at(name).toTensor();
  if (value.sizes() != param.sizes()) {
    std::ostringstream message;
    message << "optimizer state '" << name << "' of " << describe(index) << " has shape " << value.sizes()
            << ", the parameter " << param.sizes();
    throw std::invalid_argument(message.str());
  }
  // Cast to the parameter's dtype, as PyTorch's load_state_dict does.
  return value.to(param.device(), param.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor restored_if_present(const StateDict& entry, const char* name, const at::Tensor& param, int64_t index) {
  return entry.contains(name) ? restored(entry, name, param, index) : at::Tensor();
}

int64_t integer(const StateDict& entry, const char* name, int64_t index) {
  if (!entry.contains(name) || !entry.at(name).isInt()) {
    throw std::invalid_argument("optimizer state of " + describe(index) + " has no integer '" + name + "'");
  }
  return entry.at(name).toInt();
}

// Adam's and AdamW's states are distinct types with the same fields.
template <class AdamState>
void save_adam_state(const AdamState& adam, StateDict& entry) {
  entry.insert("step", adam.step());
  for (const auto& [name, value] : {std::pair<const char*, at::Tensor>{"exp_avg", adam.exp_avg()},
                                    {"exp_avg_sq", adam.exp_avg_sq()},
                                    {"max_exp_avg_sq", adam.max_exp_avg_sq()}}) {
    if (value.defined()) entry.insert(name, to_cpu(value));
  }
}

template <class AdamState>
std::unique_ptr<AdamState> load_adam_state(const StateDict& entry, const at::Tensor& param, int64_t index);

StateDict save_param_state(const torch::optim::OptimizerParamState& state, int64_t index) {
  StateDict entry = new_state_dict();
  auto put = [&entry](const char* name, const at::Tensor& value) {
    if (value.defined()) entry.insert(name, to_cpu(value));
  };
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    put("momentum_buffer", sgd->momentum_buffer());
  } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    save_adam_state(*adam, entry);
  } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    save_adam_state(*adamw, entry);
  } else if (const auto* rmsprop = dynamic_cast<const torch::optim::RMSpropParamState*>(&state)) {
    entry.insert("step", rmsprop->step());
    put("square_avg", rmsprop->square_avg());
    put("momentum_buffer", rmsprop->momentum_buffer());
    put("grad_avg", rmsprop->grad_avg());
  } else if (const auto* adagrad = dynamic_cast<const torch::optim::AdagradParamState*>(&state)) {
    entry.insert("step", adagrad->step());
    put("sum", adagrad->sum());
  } else {
    throw std::invalid_argument("the optimizer state of " + describe(index) +
                                " is of a kind checkpoints do not know; they know SGD, Adam, AdamW, RMSprop "
                                "and Adagrad");
  }
  return entry;
}

std::unique_ptr<torch::optim::OptimizerParamState> load_param_state(Optimizer& optimizer, const StateDict& entry,
                                                                    const at::Tensor& param, int64_t index) {
  if (dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr) {
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(restored(entry, "momentum_buffer", param, index));
    return state;
  }
  if (dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr) {
    return load_adam_state<torch::optim::AdamParamState>(entry, param, index);
  }
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr) {
    return load_adam_state<torch::optim::AdamWParamState>(entry, param, index);
  }
  if (dynamic_cast<torch::optim::RMSprop*>(&optimizer) != nullptr) {
    auto state = std::make_unique<torch::optim::RMSpropParamState>();
    state->step(integer(entry, "step", index));
    state->square_avg(restored(entry, "square_avg", param, index));
    state->momentum_buffer(restored_if_present(entry, "momentum_buffer", param, index));
    state->grad_avg(restored_if_present(entry, "grad_avg", param, index));
    return state;
  }
  if (dynamic_cast<torch::optim::Adagrad*>(&optimizer) != nullptr) {
    auto state = std::make_unique<torch::optim::AdagradParamState>();
    state->step(integer(entry, "step", index));
    state->sum(restored(entry, "sum", param, index));
    return state;
  }
  throw std::invalid_argument("checkpoints cannot restore this kind of optimizer; they know SGD, Adam, AdamW, "
                              "RMSprop and Adagrad");
}

template <class AdamState>
std::unique_ptr<AdamState> load_adam_state(const StateDict& entry, const at::Tensor& param, int64_t index) {
  auto state = std::make_unique<AdamState>();
  state->step(integer(entry, "step", index));
  state->exp_avg(restored(entry, "exp_avg", param, index));
  state->exp_avg_sq(restored(entry, "exp_avg_sq", param, index));
  state->max_exp_avg_sq(restored_if_present(entry, "max_exp_avg_sq", param, index));
  return state;
}

}  // namespace

ParameterStates new_parameter_states() { return ParameterStates(c10::IntType::get(), c10::AnyType::get()); }

std::vector<at::Tensor> unique_parameters(const Optimizer& optimizer) {
  std::vector<at::Tensor> params;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
    }
  }
  return params;
}

ParameterNumbering::ParameterNumbering(const Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (index_.emplace(p.unsafeGetTensorImpl(), static_cast<int64_t>(parameters_.size())).second) {
        parameters_.push_back(p);
      }
    }
  }
}

at::Tensor first_moment(Optimizer& optimizer, const at::Tensor& param) {
  const auto found = optimizer.state().find(optimizer_state_key(param));
  if (found == optimizer.state().end()) return {};
  const auto& state = *found->second;
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&state)) return sgd->momentum_buffer();
  if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&state)) return adam->exp_avg();
  if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) return adamw->exp_avg();
  if (const auto* rmsprop = dynamic_cast<const torch::optim::RMSpropParamState*>(&state)) {
    return rmsprop->momentum_buffer();
  }
  throw std::invalid_argument("the optimizer keeps no first moment (SGD or RMSprop with momentum, Adam, AdamW do)");
}

std::string why_no_first_moment(Optimizer& optimizer) {
  const bool sgd = dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr;
  const bool rmsprop = dynamic_cast<torch::optim::RMSprop*>(&optimizer) != nullptr;
  if (dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr ||
      dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr) {
    return "";
  }
  if (!sgd && !rmsprop) return "the optimizer is neither SGD, RMSprop, Adam nor AdamW";
  for (std::size_t i = 0; i < optimizer.param_groups().size(); ++i) {
    if (!(get_hyperparameter(optimizer.param_groups()[i].options(), "momentum") > 0)) {
      return "param group " + std::to_string(i) + " has momentum 0";
    }
  }
  return "";
}

int64_t ParameterNumbering::index_of(const at::Tensor& param) const {
  const auto found = index_.find(param.unsafeGetTensorImpl());
  return found == index_.end() ? -1 : found->second;
}

ParameterStates parameter_states(Optimizer& optimizer, const ParameterNumbering& numbering) {
  if (auto* wrapper = dynamic_cast<WrappingOptimizer*>(&optimizer)) return wrapper->parameter_states(numbering);
  ParameterStates states = new_parameter_states();
  const auto& own = optimizer.state();
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const int64_t index = numbering.index_of(p);
      const auto found = own.find(optimizer_state_key(p));
      if (index < 0 || found == own.end() || states.contains(index)) continue;
      states.insert(index, save_param_state(*found->second, index));
    }
  }
  return states;
}

void load_parameter_states(Optimizer& optimizer, const ParameterStates& states, const ParameterNumbering& numbering) {
  if (auto* wrapper = dynamic_cast<WrappingOptimizer*>(&optimizer)) {
    wrapper->load_parameter_states(states, numbering);
    return;
  }
  auto& own = optimizer.state();
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const int64_t index = numbering.index_of(p);
      if (index < 0) continue;
      if (!states.contains(index)) {
        own.erase(optimizer_state_key(p));  // not stepped yet when saved: starts fresh, as it did then
        continue;
      }
      const c10::IValue& entry = states.at(index);
      if (!entry.isGenericDict()) throw std::invalid_argument("optimizer state of " + describe(index) + " is not a dict");
      own[optimizer_state_key(p)] = load_param_state(optimizer, entry.toGenericDict(), p, index);
    }
  }
}

StateDict optimizer_state_dict(Optimizer& optimizer) {
  if (auto* wrapper = dynamic_cast<WrappingOptimizer*>(&optimizer)) wrapper->sync_param_groups();
  const ParameterNumbering numbering(optimizer);
  c10::impl::GenericList groups(c10::AnyType::get());
  for (const auto& group : optimizer.param_groups()) {
    StateDict entry = new_state_dict();
    c10::List<int64_t> params;
    for (const auto& p : group.params()) params.push_back(numbering.index_of(p));
    entry.insert("params", params);
    for (const auto& name : hyperparameter_names(group.options())) {
      entry.insert(name, get_hyperparameter(group.options(), name));
    }
    groups.push_back(entry);
  }
  StateDict state = new_state_dict();
  state.insert("state", parameter_states(optimizer, numbering));
  state.insert("param_groups", groups);
  return state;
}

void load_optimizer_state_dict(Optimizer& optimizer, const StateDict& state) {
  if (!state.contains("state") || !state.contains("param_groups") || !state.at("state").isGenericDict() ||
      !state.at("param_groups").isList()) {
    throw std::invalid_argument("optimizer state needs a dict 'state' and a list 'param_groups'");
  }
  const ParameterNumbering numbering(optimizer);
  const auto groups = state.at("param_groups").toList();
  auto& own_groups = optimizer.param_groups();
  if (groups.size() != own_groups.size()) {
    throw std::invalid_argument("optimizer state has " + std::to_string(groups.size()) + " param groups, this optimizer " +
                                std::to_string(own_groups.size()));
  }
  // Check everything before changing anything.
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const c10::IValue saved_group = groups.get(g);
    if (!saved_group.isGenericDict() || !saved_group.toGenericDict().contains("params")) {
      throw std::invalid_argument("optimizer param group " + std::to_string(g) + " has no 'params' list");
    }
    const auto saved = saved_group.toGenericDict().at("params").toIntVector();
    std::vector<int64_t> mine;
    for (const auto& p : own_groups[g].params()) mine.push_back(numbering.index_of(p));
    if (saved != mine) {
      throw std::invalid_argument("optimizer param group " + std::to_string(g) + " holds " + std::to_string(saved.size()) +
                                  " parameters in the saved state and " + std::to_string(mine.size()) +
                                  " here, or other ones: the model or its param groups differ");
    }
  }
  load_parameter_states(optimizer, state.at("state").toGenericDict(), numbering);
  // Hyper-parameters go to the outermost optimizer; wrappers pass them on at
  // their next sync, as they pass on a scheduler's values.
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const StateDict saved = groups.get(g).toGenericDict();
    for (const auto& name : hyperparameter_names(own_groups[g].options())) {
      if (saved.contains(name) && saved.at(name).isDouble()) {
        set_hyperparameter(own_groups[g].options(), name, saved.at(name).toDouble());
      }
    }
  }
}

}  // namespace basin
