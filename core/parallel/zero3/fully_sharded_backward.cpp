// ZeRO-3's backward side: each unit's gradients reduce-scattered to their rows' owners once ready.
#include "basin/core/parallel/zero3/fully_sharded_model.h"

#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/core/base/block_cache.h"
#include "basin/core/base/memory_reuse.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/communication/flat_tensors.h"
#include "basin/core/parallel/zero3/fully_sharded_unit.h"

namespace basin {

void FullyShardedModel::abandon_backward() noexcept {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  // Its reduce-scatters end here, discarded (each rank must abandon at the
  // same point, as it failed); every whole gradient and parameter is freed.
  for (auto& unit : units_) {
    try {
      if (unit->reducing) unit->reducing->wait();
    } catch (...) {  // that step already failed
    }
    try {
      if (unit->replicating) unit->replicating->wait();
    } catch (...) {
    }
    unit->reducing.reset();
    unit->reduce_parts.clear();
    unit->replicating.reset();
    unit->replica_sum.reset();
  }
  for (std::size_t u = 0; u < units_.size(); ++u) drop(u);
  for (auto& p : full_) p.mutable_grad().reset();
  root_awaits_backward_ = false;
  armed_ = false;
}

void FullyShardedModel::shards_stepped() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  // Every unit, the root too: a step between a forward and its backward
  // makes that forward's graph stale anyway (as PyTorch's in-place check
  // says), and a backward of a later forward gathers what it needs.
  for (std::size_t u = 0; u < units_.size(); ++u) drop(u);
}

void FullyShardedModel::prepare_for_backward() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (armed_) abandon_backward();  // the backward before failed and nobody said so
  armed_ = true;
  if (loose_runs_) {  // units ran outside run_model: that forward ends here
    graph_runs_ = runs_;
    previous_runs_ = *runs_;
    runs_.reset();
    loose_runs_ = false;
  }
  order_reduces(graph_runs_.get());
  next_reduce_ = 0;
  // What the forward freed is resident still: backward, where a step peaks, faults in only what it uses of it.
  if (options_.return_freed_memory) return_freed_memory();
  for (auto& unit : units_) unit->fired = 0, unit->reduce_started = false;
}

void FullyShardedModel::order_reduces(const Runs* runs) {
  // Backward completes a unit's gradients where it reaches the unit's first
  // run (a tied embedding's: its lookup, at the very end): the last first
  // run first. Units no run reached follow, the root last; a unit whose
  // every parameter is frozen has nothing to reduce.
  std::vector<bool> seen(units_.size(), false);
  std::vector<std::size_t> first_runs;
  for (std::size_t i = 0; runs != nullptr && i < runs->size(); ++i) {
    const std::size_t u = (*runs)[i].unit;
    if (!seen[u]) seen[u] = true, first_runs.push_back(u);
  }
  reduce_order_.clear();
  for (auto u = first_runs.rbegin(); u != first_runs.rend(); ++u) {
    if (units_[*u]->hooked > 0) reduce_order_.push_back(*u);
  }
  for (std::size_t u = declared_; u-- > 0;) {
    if (!seen[u] && units_[u]->hooked > 0) reduce_order_.push_back(u);
  }
  if (!units_[declared_]->params.empty()) reduce_order_.push_back(declared_);
}

void FullyShardedModel::mark_ready(std::size_t i) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!armed_) {
    throw std::logic_error("zero3: a backward that is not synced (a rank-local pass); under zero3 every backward "
                           "reduce-scatters its gradients to the shards");
  }
  Unit& unit = *units_[unit_of_[i]];
  // Its every gradient is in: no backward node of the unit needs its
  // parameters any more, unless some are frozen (then backward's end frees it).
  if (++unit.fired == unit.hooked && !unit.mixed) release(unit_of_[i]);
  if (options_.overlap) start_ready_reduces();
}

void FullyShardedModel::start_ready_reduces() {
  // In one order on every rank (backward's), each unit once all its gradients are in.
  while (next_reduce_ < reduce_order_.size()) {
    Unit& unit = *units_[reduce_order_[next_reduce_]];
    if (unit.fired < unit.hooked) return;
    start_reduce(reduce_order_[next_reduce_++]);
  }
}

void FullyShardedModel::start_reduce(std::size_t u) {
  Unit& unit = *units_[u];
  const int world = communicator_->world_size();
  const auto count = static_cast<int64_t>(unit.params.size());
  // Each rank's part: its rows of every gradient, then one flag per
  // parameter (1: this rank has a gradient), summed with them. A tensor of
  // its own each: the others' are freed as the reduce ends, and this rank's
  // becomes its gradients.
  unit.reduce_parts.clear();
  for (const int64_t n : unit.part_numel) {
    const auto options = unit.options.dtype(unit.reduce_dtype);
    // On the CPU from the blocks kept for reuse: this rank's part comes back when its gradients are let go.
    unit.reduce_parts.push_back(options.device().is_cpu() ? blocks_->empty(n + count, unit.reduce_dtype).zero_()
                                                          : at::zeros({n + count}, options));
  }
  at::NoGradGuard no_grad;
  std::vector<int64_t> at(static_cast<std::size_t>(world), 0);
  for (std::size_t j = 0; j < unit.params.size(); ++j) {
    const std::size_t i = unit.params[j];
    if (!trains_[i]) continue;  // frozen: no rows in the parts, its flag stays 0
    at::Tensor& grad = full_[i].mutable_grad();
    const int64_t width = zero3_rows::row_numel(full_[i]);
    const at::Tensor rows = grad.defined() ? grad.reshape({zero3_rows::rows_of(full_[i]), width}) : at::Tensor();
    int64_t row = 0;
    for (int r = 0; r < world; ++r) {
      const auto rr = static_cast<std::size_t>(r);
      const int64_t n = rows_[i][rr];
      if (rows.defined()) {
        if (n > 0) unit.reduce_parts[rr].narrow(0, at[rr], n * width).copy_(rows.narrow(0, row, n).reshape({-1}));
        unit.reduce_parts[rr][unit.part_numel[rr] + static_cast<int64_t>(j)].fill_(1);
      }
      row += n;
      at[rr] += n * width;
    }
    grad.reset();  // the whole gradient lives on in the parts only
  }
  if (!unit.mixed) release(u);
  // The reduce-scatter before this one ran while this unit's backward
  // computed: it ends now, so a rank holds every rank's part of at most two
  // units' gradients, not of the whole model's, until backward ends.
  for (const std::size_t earlier : reduce_order_) {
    if (earlier != u && units_[earlier]->reducing) finish_reduce(earlier);
  }
  unit.reduce_started = true;
  unit.reducing = communicator_->start_reduce_scatter_sum(unit.reduce_parts);
}

void FullyShardedModel::finish_reduce(std::size_t u) {
  Unit& unit = *units_[u];
  auto pending = std::move(unit.reducing);
  pending->wait();
  const at::Tensor mine = unit.reduce_parts[static_cast<std::size_t>(communicator_->rank())];
  unit.reduce_parts.clear();
  if (replicas_ && replicas_->world_size() > 1) {
    // HSDP: the other shard groups' sums of these rows too, in fp32 (as the mean is taken; Gloo before 2.x sums
    // no bf16), waited for at backward's end.
    const bool narrow = mine.scalar_type() == at::kBFloat16 || mine.scalar_type() == at::kHalf;
    unit.replica_sum = narrow ? mine.to(at::kFloat) : mine;
    unit.replicating = replicas_->start_all_reduce_sum(unit.replica_sum);
    return;
  }
  add_reduced(u, mine, communicator_->world_size());
}

void FullyShardedModel::finish_replica_sum(std::size_t u) {
  Unit& unit = *units_[u];
  auto pending = std::move(unit.replicating);
  const at::Tensor sum = std::move(unit.replica_sum);
  pending->wait();
  add_reduced(u, sum, static_cast<int64_t>(communicator_->world_size()) * replicas_->world_size());
}

void FullyShardedModel::add_reduced(std::size_t u, const at::Tensor& mine, int64_t ranks) {
  Unit& unit = *units_[u];
  const auto me = static_cast<std::size_t>(communicator_->rank());
  const at::Tensor flags = mine.narrow(0, unit.part_numel[me], static_cast<int64_t>(unit.params.size())).cpu();
  at::NoGradGuard no_grad;
  int64_t at = 0;
  for (std::size_t j = 0; j < unit.params.size(); ++j) {
    if (!trains_[unit.params[j]]) continue;  // frozen: nothing was reduced for it
    at::Tensor& shard = shards_[unit.params[j]];
    const int64_t n = shard.numel();
    if (flags[static_cast<int64_t>(j)].item<double>() > 0) {
      // On the fp32 shard whatever the reduce's dtype: the mean is taken in
      // fp32. In the reduce's own memory where it is the shard's dtype.
      const at::Tensor rows = mine.narrow(0, at, n);
      at::Tensor mean = rows.scalar_type() == shard.scalar_type()
                            ? alias_of(rows.div_(ranks), shard.sizes())
                            : rows.view(shard.sizes()).to(shard.scalar_type()).div_(ranks);
      at::Tensor& grad = shard.mutable_grad();
      if (grad.defined()) {
        grad.add_(mean);
      } else {
        grad = mean;
      }
    }
    at += n;
  }
}

void FullyShardedModel::finish_backward() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!armed_) return;
  armed_ = false;
  std::exception_ptr failed;
  try {
    while (next_reduce_ < reduce_order_.size()) start_reduce(reduce_order_[next_reduce_++]);
  } catch (...) {
    failed = std::current_exception();
  }
  for (const std::size_t u : reduce_order_) {
    try {
      if (units_[u]->reducing) finish_reduce(u);
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  for (const std::size_t u : reduce_order_) {  // HSDP's sums over the replicas, started in that order
    try {
      if (units_[u]->replicating) finish_replica_sum(u);
    } catch (...) {
      if (!failed) failed = std::current_exception();
      units_[u]->replicating.reset();
      units_[u]->replica_sum.reset();
    }
  }
  for (std::size_t u = 0; u < units_.size(); ++u) {  // with any gather issued ahead for a unit backward did not reach
    try {
      release(u);
    } catch (...) {
      if (!failed) failed = std::current_exception();
      units_[u]->gathering.reset();
      release(u);
    }
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace basin
