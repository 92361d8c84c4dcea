// ZeRO-3's whole parameters on demand: gathered from the shards, or put in the model for a while (see the header).
#include "basin/core/parallel/zero3/fully_sharded_model.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include "basin/core/base/block_cache.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/parallel/zero3/fully_sharded_unit.h"

namespace basin {

void FullyShardedModel::with_whole_parameters(const std::function<void()>& use) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (options_.mixed_precision.active()) {
    with_master_parameters(use);
    return;
  }
  std::vector<bool> was(units_.size());
  for (std::size_t u = 0; u < units_.size(); ++u) was[u] = units_[u]->gathered;
  std::exception_ptr failed;
  try {
    for (std::size_t u = 0; u < units_.size(); ++u) gather(u);
    use();
  } catch (...) {
    failed = std::current_exception();
  }
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (!was[u]) drop(u);
  }
  blocks_->free_kept();  // every unit's gather at once: no step holds as much
  if (failed) std::rethrow_exception(failed);
}

void FullyShardedModel::with_master_parameters(const std::function<void()>& use) {
  // The parameters take the shards' dtype and values for `use` (an export
  // writes fp32), then get back what they held: their storage object (what
  // autograd saved reads) and the gradient accumulator their hooks are on,
  // which set_data forgets on a dtype change.
  const std::vector<at::Tensor> whole = whole_parameters();
  std::vector<at::Tensor> held(full_.size());
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators(full_.size());
  for (std::size_t i = 0; i < full_.size(); ++i) {
    accumulators[i] = torch::autograd::impl::try_get_grad_accumulator(full_[i]);
    held[i] = full_[i].variable_data();
    full_[i].set_data(whole[i]);
  }
  std::exception_ptr failed;
  try {
    use();
  } catch (...) {
    failed = std::current_exception();
  }
  for (std::size_t i = 0; i < full_.size(); ++i) {
    full_[i].set_data(held[i]);
    if (accumulators[i]) torch::autograd::impl::set_grad_accumulator(full_[i], accumulators[i]);
  }
  if (failed) std::rethrow_exception(failed);
}

std::vector<at::Tensor> FullyShardedModel::whole_parameters() {
  // From the shards, into tensors of their dtype (the model's own may hold
  // param_dtype, or be whole for a pending backward): one gather per unit,
  // in the units' order on every rank.
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::vector<at::Tensor> whole(full_.size());
  at::NoGradGuard no_grad;
  for (const auto& unit : units_) {
    if (unit->params.empty()) continue;
    std::vector<std::vector<at::Tensor>> pieces(static_cast<std::size_t>(communicator_->world_size()));
    for (const std::size_t i : unit->params) {
      whole[i] = at::empty(full_[i].sizes(), shards_[i].options().requires_grad(false));
      add_pieces(i, whole[i], pieces);
    }
    communicator_->start_all_gather(std::move(pieces))->wait();
  }
  return whole;
}

}  // namespace basin
