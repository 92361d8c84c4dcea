#include "basin/algorithms/loss/saf.h"

#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/core/communication/communicator.h"

namespace basin {

SAF::SAF(Params& params) : TrajectoryLoss(params, 0.3) { epochs_ago_ = params.integer("epochs_ago", 2, 1); }

bool SAF::match(Event event, const State& state) const {
  return event == Event::AFTER_LOSS || event == Event::AFTER_STEP ||
         (event == Event::INIT && (!state.outputs_given || state.outputs_per_token));
}

void SAF::apply(Event event, State& state, Logger& /*logger*/) {
  if (event == Event::INIT) {
    require_outputs(state);  // throws: INIT matches only when there are no class outputs
    return;
  }
  if (event == Event::AFTER_STEP) {
    write_recorded(state);
    return;
  }
  if (!state.microbatch.ids.defined()) {
    throw std::runtime_error("saf needs each sample's id in the training set (Batch::ids); this batch has none");
  }
  if (!state.request.backward) return;  // a forward alone (ESAM's): no gradient comes from its loss
  if (state.pass != Pass::kDescent) record(state);
  const int64_t back = state.timestamp.epoch - epochs_ago_;
  if (!active(state) || !bank_.defined() || back < 0) return;
  // Only the samples whose outputs were written that epoch count.
  const int64_t slot = back % (epochs_ago_ + 1);
  const at::Tensor counted = written_.index_select(0, state.microbatch.ids).select(1, slot) == back;
  add_term(state, bank_.index_select(0, state.microbatch.ids).select(1, slot), counted);
}

void SAF::record(const State& state) {
  recorded_ids_.push_back(state.microbatch.ids);
  recorded_outputs_.push_back(state.outputs.detach().to(at::kCPU, at::kFloat));
}

void SAF::write_recorded(const State& state) {
  if (recorded_ids_.empty()) return;
  at::Tensor ids = at::cat(recorded_ids_);
  at::Tensor outputs = at::cat(recorded_outputs_);
  recorded_ids_.clear();
  recorded_outputs_.clear();
  if (state.communicator && state.world_size > 1) {
    // Every rank's rows in one all-reduce: each fills its own block of zeros.
    // Ids travel as doubles: exact below 2^53 samples.
    const int64_t rows = ids.size(0), columns = outputs.size(1) + 1;
    at::Tensor gathered = at::zeros({state.world_size, rows, columns}, at::kDouble);
    gathered[state.rank].select(1, 0).copy_(ids);
    gathered[state.rank].narrow(1, 1, columns - 1).copy_(outputs);
    std::vector<at::Tensor> tensors{gathered.to(state.device)};
    state.communicator->all_reduce_sum(tensors);
    gathered = tensors.front().cpu().reshape({-1, columns});
    ids = gathered.select(1, 0).to(at::kLong);
    outputs = gathered.narrow(1, 1, columns - 1).to(at::kFloat);
  }
  if (!bank_.defined()) {
    if (state.train_size <= 0) throw std::runtime_error("saf needs the training set's size (State::train_size)");
    bank_ = at::zeros({state.train_size, epochs_ago_ + 1, outputs.size(1)}, at::kFloat);
    written_ = at::full({state.train_size, epochs_ago_ + 1}, -1, at::kLong);
  }
  const int64_t slot = state.timestamp.epoch % (epochs_ago_ + 1);
  bank_.select(1, slot).index_copy_(0, ids, outputs);
  written_.select(1, slot).index_fill_(0, ids, state.timestamp.epoch);
}

StateDict SAF::state_dict() const {
  StateDict state = new_state_dict();
  if (bank_.defined()) {
    state.insert("bank", bank_);
    state.insert("written", written_);
  }
  return state;
}

void SAF::load_state_dict(const StateDict& state) {
  if (!state.contains("bank")) {
    bank_ = written_ = at::Tensor();
    return;
  }
  const auto tensor = [&state](const char* key) {
    return state.contains(key) && state.at(key).isTensor() ? state.at(key).toTensor() : at::Tensor();
  };
  const at::Tensor bank = tensor("bank"), written = tensor("written");
  if (!bank.defined() || bank.dim() != 3 || bank.size(1) != epochs_ago_ + 1 || !written.defined() ||
      written.sizes() != bank.sizes().slice(0, 2)) {
    throw std::invalid_argument("SAF state: 'bank' must be a [samples, " + std::to_string(epochs_ago_ + 1) +
                                ", classes] tensor and 'written' a [samples, " + std::to_string(epochs_ago_ + 1) +
                                "] one (epochs_ago " + std::to_string(epochs_ago_) + ")");
  }
  bank_ = bank.to(at::kCPU, at::kFloat).clone();
  written_ = written.to(at::kCPU, at::kLong).clone();
}

BASIN_REGISTER(algorithm_registry(), "saf", SAF);

}  // namespace basin
