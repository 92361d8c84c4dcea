#include "basin/core/checkpoint/checkpoint.h"

#include <map>
#include <sstream>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/communication/byte_collectives.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/engine/algorithm.h"
#include "basin/core/engine/callback.h"
#include "basin/core/engine/engine.h"
#include "basin/core/engine/logger.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/optim/scheduler.h"
#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

namespace {

// The model's tensors the "model" part holds: its buffers, and each
// parameter whole here. A parameter in rows holds no bytes between units:
// the trainer's "shards" part saves this rank's rows of it.
std::map<std::string, at::Tensor> whole_tensors(torch::nn::Module& model, const ShardedParameters* shards) {
  std::map<std::string, at::Tensor> tensors;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (shards == nullptr || !shards->placement(item.value()).parameter.in_rows()) {
      tensors.emplace(item.key(), item.value());
    }
  }
  for (const auto& item : model.named_buffers(/*recurse=*/true)) tensors.emplace(item.key(), item.value());
  return tensors;
}

StateDict model_state(torch::nn::Module& model, const ShardedParameters* shards) {
  StateDict state = new_state_dict();
  for (const auto& [name, tensor] : whole_tensors(model, shards)) state.insert(name, tensor.detach().cpu());
  return state;
}

void load_model_state(torch::nn::Module& model, const StateDict& saved, const ShardedParameters* shards) {
  auto tensors = whole_tensors(model, shards);
  for (const auto& entry : saved) {
    if (tensors.count(entry.key().toStringRef()) == 0) {
      throw CheckpointError("checkpoint model has tensor '" + entry.key().toStringRef() + "', which this model lacks");
    }
  }
  at::NoGradGuard no_grad;
  for (auto& [name, tensor] : tensors) {
    if (!saved.contains(name) || !saved.at(name).isTensor()) {
      throw CheckpointError("checkpoint model lacks tensor '" + name + "'");
    }
    const at::Tensor value = saved.at(name).toTensor();
    if (value.sizes() != tensor.sizes()) {
      std::ostringstream message;
      message << "checkpoint model tensor '" << name << "' has shape " << value.sizes() << ", this model's "
              << tensor.sizes();
      throw CheckpointError(message.str());
    }
    tensor.copy_(value);  // in place: the optimizer's state stays keyed to the same tensors
  }
}

// Generator states of this rank: the CPU's, and its GPU's on a CUDA run.
StateDict generator_states(const State& state) {
  StateDict rng = new_state_dict();
  {
    auto cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu.mutex());
    rng.insert("cpu", cpu.get_state());
  }
  if (state.device.is_cuda()) {
    auto cuda = at::globalContext().defaultGenerator(state.device);
    std::lock_guard<std::mutex> lock(cuda.mutex());
    rng.insert("cuda", cuda.get_state());
  }
  return rng;
}

void load_generator_states(const State& state, const StateDict& rng) {
  if (!rng.contains("cpu")) throw CheckpointError("checkpoint rng entry has no 'cpu' generator state");
  {
    auto cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu.mutex());
    cpu.set_state(rng.at("cpu").toTensor());
  }
  if (state.device.is_cuda() && rng.contains("cuda")) {
    auto cuda = at::globalContext().defaultGenerator(state.device);
    std::lock_guard<std::mutex> lock(cuda.mutex());
    cuda.set_state(rng.at("cuda").toTensor());
  }
}

c10::impl::GenericList all_ranks_generators(const State& state) {
  c10::impl::GenericList list(c10::AnyType::get());
  const StateDict mine = generator_states(state);
  if (!state.communicator || state.communicator->world_size() == 1) {
    list.push_back(mine);
    return list;
  }
  const std::vector<char> pickled = torch::jit::pickle_save(mine);
  const c10::Device device = state.device.is_cuda() ? state.device : c10::Device(c10::kCPU);
  const auto gathered =
      gather_bytes(*state.communicator, std::string(pickled.begin(), pickled.end()), 0, device);
  for (const auto& bytes : gathered) list.push_back(torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())));
  return list;
}

StateDict timestamp_state(const Timestamp& ts) {
  StateDict state = new_state_dict();
  state.insert("epoch", ts.epoch);
  state.insert("step", ts.step);
  state.insert("batch_in_epoch", ts.batch_in_epoch);
  state.insert("samples", ts.samples);
  return state;
}

c10::IValue part(const StateDict& checkpoint, const std::string& name) {
  if (!checkpoint.contains(name)) throw CheckpointError("checkpoint has no '" + name + "' entry");
  return checkpoint.at(name);
}

StateDict dict_part(const StateDict& checkpoint, const std::string& name) {
  const c10::IValue value = part(checkpoint, name);
  if (!value.isGenericDict()) throw CheckpointError("checkpoint entry '" + name + "' is not a dict");
  return value.toGenericDict();
}

int64_t int_of(const StateDict& dict, const std::string& where, const std::string& key) {
  if (!dict.contains(key) || !dict.at(key).isInt()) {
    throw CheckpointError("checkpoint entry '" + where + "' has no integer '" + key + "'");
  }
  return dict.at(key).toInt();
}

// Algorithms and callbacks by name; a second one of a name gets "#2".
template <class T>
std::vector<std::string> unique_names(const std::vector<std::shared_ptr<T>>& items) {
  std::map<std::string, int> seen;
  std::vector<std::string> names;
  for (const auto& item : items) {
    const int n = ++seen[item->name()];
    names.push_back(n == 1 ? item->name() : item->name() + "#" + std::to_string(n));
  }
  return names;
}

// Callbacks, then logger destinations (the metrics file keeps its length).
std::vector<std::shared_ptr<Callback>> callbacks_and_loggers(const Engine& engine) {
  std::vector<std::shared_ptr<Callback>> all(engine.callbacks().begin(), engine.callbacks().end());
  all.insert(all.end(), engine.loggers().begin(), engine.loggers().end());
  return all;
}

// Rethrows what a part's loader threw as a CheckpointError that names the part.
template <class F>
void loading(const std::string& what, F&& load) {
  try {
    load();
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& error) {
    throw CheckpointError("checkpoint entry '" + what + "' does not fit this run: " + error.what());
  }
}

}  // namespace

bool saves_rank_files(const State& state) { return state.model && holds_rows_of(state.shards, *state.model); }

StateDict capture_checkpoint(Engine& engine) {
  State& state = engine.state();
  const bool own_file = saves_rank_files(state);
  StateDict checkpoint = new_state_dict();
  StateDict meta = new_state_dict();
  meta.insert("format", kCheckpointFormat);
  meta.insert("torch", std::string(compat::torch_version()));
  meta.insert("world_size", static_cast<int64_t>(state.world_size));
  if (own_file) meta.insert("rank", static_cast<int64_t>(state.rank));
  checkpoint.insert("basin", meta);
  checkpoint.insert("timestamp", timestamp_state(state.timestamp));
  if (state.model) checkpoint.insert("model", model_state(*state.model, state.shards));
  if (state.optimizer) checkpoint.insert("optimizer", optimizer_state_dict(*state.optimizer));
  c10::impl::GenericList schedulers(c10::AnyType::get());
  for (const auto& scheduler : state.schedulers) schedulers.push_back(scheduler->state_dict());
  checkpoint.insert("schedulers", schedulers);
  StateDict algorithms = new_state_dict();
  const auto algorithm_names = unique_names(engine.algorithms());
  for (std::size_t i = 0; i < algorithm_names.size(); ++i) {
    algorithms.insert(algorithm_names[i], engine.algorithms()[i]->state_dict());
  }
  checkpoint.insert("algorithms", algorithms);
  StateDict callbacks = new_state_dict();
  const auto observers = callbacks_and_loggers(engine);
  const auto callback_names = unique_names(observers);
  for (std::size_t i = 0; i < callback_names.size(); ++i) {
    const StateDict saved = observers[i]->state_dict();
    if (!saved.empty()) callbacks.insert(callback_names[i], saved);
  }
  checkpoint.insert("callbacks", callbacks);
  for (const auto& extra : engine.checkpoint_parts()) checkpoint.insert(extra.name, extra.save());
  if (own_file) {
    c10::impl::GenericList own(c10::AnyType::get());  // each rank's file holds its own streams
    own.push_back(generator_states(state));
    checkpoint.insert("rng", own);
  } else {
    checkpoint.insert("rng", all_ranks_generators(state));
  }
  return checkpoint;
}

void restore_checkpoint(Engine& engine, const StateDict& checkpoint) {
  State& state = engine.state();
  const StateDict meta = dict_part(checkpoint, "basin");
  const int64_t format = int_of(meta, "basin", "format");
  if (format != kCheckpointFormat) {
    throw CheckpointError("checkpoint format " + std::to_string(format) + " is not the format this basin reads (" +
                          std::to_string(kCheckpointFormat) + ")");
  }
  engine.run(Event::BEFORE_LOAD);
  const StateDict ts = dict_part(checkpoint, "timestamp");
  state.timestamp.epoch = int_of(ts, "timestamp", "epoch");
  state.timestamp.step = int_of(ts, "timestamp", "step");
  state.timestamp.batch_in_epoch = int_of(ts, "timestamp", "batch_in_epoch");
  state.timestamp.samples = int_of(ts, "timestamp", "samples");
  if (saves_rank_files(state)) {
    const int64_t saved_rank = meta.contains("rank") && meta.at("rank").isInt() ? meta.at("rank").toInt() : -1;
    if (saved_rank != state.rank) {
      throw CheckpointError(saved_rank < 0 ? "this zero3 run resumes from each rank's own file of a sharded "
                                             "checkpoint, not from a whole one"
                                           : "checkpoint file of rank " + std::to_string(saved_rank) +
                                                 " given to rank " + std::to_string(state.rank));
    }
  }
  if (state.model) {
    loading("model", [&] { load_model_state(*state.model, dict_part(checkpoint, "model"), state.shards); });
  }
  if (state.optimizer) {
    loading("optimizer", [&] { load_optimizer_state_dict(*state.optimizer, dict_part(checkpoint, "optimizer")); });
  }
  const c10::IValue schedulers = part(checkpoint, "schedulers");
  if (!schedulers.isList() || schedulers.toListRef().size() != state.schedulers.size()) {
    throw CheckpointError("checkpoint has " +
                          (schedulers.isList() ? std::to_string(schedulers.toListRef().size()) : std::string("no")) +
                          " schedulers, this run " + std::to_string(state.schedulers.size()));
  }
  for (std::size_t i = 0; i < state.schedulers.size(); ++i) {
    loading("schedulers[" + std::to_string(i) + "]", [&] {
      state.schedulers[i]->load_state_dict(schedulers.toListRef()[i].toGenericDict());
    });
  }
  const StateDict algorithms = dict_part(checkpoint, "algorithms");
  const auto algorithm_names = unique_names(engine.algorithms());
  for (std::size_t i = 0; i < algorithm_names.size(); ++i) {
    if (!algorithms.contains(algorithm_names[i])) {
      throw CheckpointError("checkpoint has no state for algorithm '" + algorithm_names[i] + "'");
    }
    loading("algorithms." + algorithm_names[i], [&] {
      engine.algorithms()[i]->load_state_dict(algorithms.at(algorithm_names[i]).toGenericDict());
    });
  }
  // A callback without saved state (progress display, one added on resume) starts fresh.
  const StateDict callbacks = dict_part(checkpoint, "callbacks");
  const auto observers = callbacks_and_loggers(engine);
  const auto callback_names = unique_names(observers);
  for (std::size_t i = 0; i < callback_names.size(); ++i) {
    if (!callbacks.contains(callback_names[i])) continue;
    loading("callbacks." + callback_names[i], [&] {
      observers[i]->load_state_dict(callbacks.at(callback_names[i]).toGenericDict());
    });
  }
  for (const auto& extra : engine.checkpoint_parts()) {
    loading(extra.name, [&] { extra.load(part(checkpoint, extra.name)); });
  }
  const c10::IValue rng = part(checkpoint, "rng");
  if (!rng.isList() || rng.toListRef().empty()) throw CheckpointError("checkpoint entry 'rng' is not a list of ranks");
  const auto& ranks = rng.toListRef();
  // Each rank continues its own stream; a rank the saving run did not have reuses one.
  const auto& mine = ranks[static_cast<std::size_t>(state.rank) % ranks.size()];
  loading("rng", [&] { load_generator_states(state, mine.toGenericDict()); });
  engine.run(Event::AFTER_LOAD);
}

}  // namespace basin
