// ZeRO-3's shards and gathers: sharding the model, gathering and freeing units (see the header).
#include "basin/core/parallel/zero3/fully_sharded_model.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <torch/nn/module.h>

#include "basin/core/base/block_cache.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/parallel/zero3/fully_sharded_unit.h"

namespace basin {

namespace {

/// Gives `param`'s storage `bytes` fresh bytes (0: frees them), keeping the
/// storage object, so every tensor that shares it (autograd's saved ones)
/// sees the new bytes, and the version counter, which an in-place write
/// would bump (and backward would then refuse the saved tensors). On the
/// CPU the bytes come from `blocks`, and go back to it when freed.
void set_storage_bytes(const at::Tensor& param, std::size_t bytes, BlockCache& blocks) {
  c10::StorageImpl* storage = param.storage().unsafeGetStorageImpl();
  // A storage read from a file (TorchScript's) has no allocator of its own.
  c10::Allocator* allocator = storage->allocator() != nullptr ? storage->allocator() : c10::GetAllocator(param.device().type());
  storage->set_data_ptr_noswap(bytes > 0 && param.device().is_cpu() ? blocks.take(bytes) : allocator->allocate(bytes));
  storage->set_nbytes(bytes);
}

/// A tensor over `param`'s storage with a version counter of its own: a
/// write through it leaves `param`'s version as it was.
at::Tensor writable_alias(const at::Tensor& param) {
  at::NoGradGuard no_grad;
  at::Tensor alias = at::empty({0}, param.options().requires_grad(false));
  alias.set_(param.storage(), param.storage_offset(), param.sizes(), param.strides());
  return alias;
}

}  // namespace

FullyShardedModel::FullyShardedModel(torch::nn::Module& model, const std::vector<torch::nn::Module*>& units,
                                     std::shared_ptr<Communicator> communicator, FullyShardedOptions options,
                                     std::shared_ptr<Communicator> replicas)
    : communicator_(std::move(communicator)),
      replicas_(std::move(replicas)),
      options_(std::move(options)),
      blocks_(std::make_unique<BlockCache>()) {
  const int world = communicator_->world_size();
  const int me = communicator_->rank();
  std::unordered_map<const c10::TensorImpl*, std::size_t> unit_of_param;
  for (std::size_t u = 0; u < units.size(); ++u) {
    for (const auto& p : units[u]->parameters(/*recurse=*/true)) {
      const auto placed = unit_of_param.emplace(p.unsafeGetTensorImpl(), u);
      if (!placed.second && placed.first->second != u) {
        throw std::invalid_argument("zero3: a parameter of unit '" + units[u]->name() +
                                    "' is in another unit too; units must be disjoint blocks");
      }
    }
  }
  declared_ = units.size();
  for (std::size_t u = 0; u <= units.size(); ++u) {
    units_.push_back(std::make_unique<Unit>());
    units_.back()->name = u < units.size() ? units[u]->name() : "the root (parameters under no unit)";
    units_.back()->part_numel.assign(static_cast<std::size_t>(world), 0);
  }

  at::NoGradGuard no_grad;
  for (const auto& p : model.parameters(/*recurse=*/true)) {
    if (index_.count(p.unsafeGetTensorImpl()) != 0) continue;  // a tied weight: one shard
    if (!p.is_contiguous() || p.storage_offset() != 0 || p.storage().nbytes() != p.nbytes()) {
      throw std::invalid_argument("zero3: every parameter must own its storage whole (contiguous, offset 0)");
    }
    const auto found = unit_of_param.find(p.unsafeGetTensorImpl());
    const std::size_t u = found == unit_of_param.end() ? declared_ : found->second;
    Unit& unit = *units_[u];
    const bool lowered = options_.mixed_precision.active() && p.is_floating_point();
    const at::ScalarType gathered = lowered ? *options_.mixed_precision.param_dtype : p.scalar_type();
    if (!unit.params.empty() && (unit.options.dtype() != gathered || unit.options.device() != p.device())) {
      throw std::invalid_argument("zero3: unit '" + unit.name + "' mixes dtypes or devices; a unit gathers one");
    }
    unit.options = p.options().dtype(gathered).requires_grad(false);
    unit.reduce_dtype = lowered ? options_.mixed_precision.reduce_dtype : gathered;
    const std::size_t index = full_.size();
    unit.params.push_back(index);
    index_[p.unsafeGetTensorImpl()] = index;
    unit_of_.push_back(u);

    const int64_t rows = zero3_rows::rows_of(p), each = (rows + world - 1) / world;
    std::vector<int64_t> counts(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      counts[static_cast<std::size_t>(r)] = std::clamp<int64_t>(rows - r * each, 0, each);
      // A frozen parameter (LoRA's base) has no gradient: no room in the reduce-scatter.
      if (p.requires_grad()) unit.part_numel[static_cast<std::size_t>(r)] += counts[static_cast<std::size_t>(r)] * zero3_rows::row_numel(p);
    }
    rows_.push_back(counts);
    std::vector<int64_t> shape = p.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape[0] = counts[static_cast<std::size_t>(me)];
    at::Tensor shard = p.detach()
                           .reshape({rows, zero3_rows::row_numel(p)})
                           .narrow(0, std::min(rows, me * each), shape[0])
                           .clone()
                           .view(shape);
    shards_.push_back(shard.requires_grad_(p.requires_grad()));
    shard_index_[shards_.back().unsafeGetTensorImpl()] = index;
    trains_.push_back(p.requires_grad());
    if (gathered != p.scalar_type()) {
      // The model's parameter takes the gathers' dtype for good (before its
      // gradient accumulator is hooked: set_data drops it on a dtype change).
      p.mutable_grad().reset();
      p.set_data(at::empty(p.sizes(), unit.options));
    }
    full_.push_back(p);
    set_storage_bytes(p, 0, *blocks_);
  }
  for (std::size_t u = 0; u < units_.size(); ++u) {
    // A unit is freed once its gradients are in, but a frozen parameter's
    // backward (LoRA's W, carrying the gradient to the unit's input) can
    // still run after that and would find no bytes: a unit of both kinds
    // stays whole to the end of backward instead.
    const auto& params = units_[u]->params;
    const auto trains = std::count_if(params.begin(), params.end(), [&](std::size_t i) { return full_[i].requires_grad(); });
    units_[u]->mixed = trains != 0 && trains != static_cast<std::ptrdiff_t>(params.size());
  }
  for (std::size_t i = 0; i < full_.size(); ++i) {
    if (full_[i].requires_grad()) ++units_[unit_of_[i]]->hooked;
  }
  ready_hooks_ = GradientReadyHooks(full_, [this](std::size_t param) { mark_ready(param); });
  order_reduces(nullptr);
}

FullyShardedModel::~FullyShardedModel() {
  ready_hooks_ = GradientReadyHooks();  // no gradient marks a unit ready while the units wind down
  for (auto& unit : units_) {
    try {
      if (unit->gathering) unit->gathering->wait();
      if (unit->reducing) unit->reducing->wait();
    } catch (...) {  // a failed collective already failed the step that started it
    }
  }
}

const at::Tensor& FullyShardedModel::shard_of(const at::Tensor& param) const {
  const auto found = index_.find(param.unsafeGetTensorImpl());
  if (found == index_.end()) throw std::invalid_argument("zero3: not a parameter of the sharded model");
  return shards_[found->second];
}

int64_t FullyShardedModel::first_row(const at::Tensor& param) const {
  if (index_.count(param.unsafeGetTensorImpl()) != 0) return 0;  // the model's parameter: every row, when gathered
  const auto found = shard_index_.find(param.unsafeGetTensorImpl());
  if (found == shard_index_.end()) throw std::invalid_argument("zero3: not a parameter of the sharded model");
  const auto me = static_cast<std::size_t>(communicator_->rank());
  int64_t row = 0;
  for (std::size_t r = 0; r < me; ++r) row += rows_[found->second][r];
  return row;
}

void FullyShardedModel::add_pieces(std::size_t i, const at::Tensor& whole,
                                   std::vector<std::vector<at::Tensor>>& pieces) const {
  const int64_t width = zero3_rows::row_numel(whole);
  const at::Tensor rows = whole.view({zero3_rows::rows_of(whole), width});
  const int me = communicator_->rank();
  int64_t row = 0;
  for (std::size_t r = 0; r < pieces.size(); ++r) {
    const int64_t n = rows_[i][r];
    if (n > 0) {
      at::Tensor piece = rows.narrow(0, row, n);
      // Into a low-precision whole, this rounds the fp32 shard once (to nearest), as autocast's cast does.
      if (static_cast<int>(r) == me) piece.copy_(shards_[i].detach().view({n, width}));
      pieces[r].push_back(piece);
    }
    row += n;
  }
}

void FullyShardedModel::start_gather(std::size_t u) {
  Unit& unit = *units_[u];
  if (unit.gathered || unit.gathering || unit.params.empty()) return;
  // Straight into the parameters' own storages: rank r's rows of each are
  // one contiguous piece of it, so nothing but a part's staging is extra.
  std::vector<std::vector<at::Tensor>> pieces(static_cast<std::size_t>(communicator_->world_size()));
  at::NoGradGuard no_grad;
  for (const std::size_t i : unit.params) {
    const at::Tensor& p = full_[i];
    set_storage_bytes(p, p.nbytes(), *blocks_);
    add_pieces(i, writable_alias(p), pieces);
  }
  unit.gathering = communicator_->start_all_gather(std::move(pieces));
  note_gathered();
}

void FullyShardedModel::gather(std::size_t u) {
  Unit& unit = *units_[u];
  if (unit.gathered || unit.params.empty()) return;
  start_gather(u);
  auto pending = std::move(unit.gathering);
  unit.gathered = true;  // its storages hold bytes: release() frees them, even if the wait throws
  pending->wait();
}

void FullyShardedModel::release(std::size_t u) {
  Unit& unit = *units_[u];
  if (unit.gathering) {
    // A gather issued ahead for a unit that did not run: it writes into the
    // storages until it is done, so it ends before they are freed.
    auto pending = std::move(unit.gathering);
    unit.gathered = true;
    pending->wait();
  }
  if (held_to_next_run_ == u) held_to_next_run_.reset();
  if (!unit.gathered) return;
  for (const std::size_t i : unit.params) set_storage_bytes(full_[i], 0, *blocks_);
  unit.gathered = false;
  if (u == declared_) root_awaits_backward_ = false;
}

void FullyShardedModel::drop(std::size_t u) noexcept {
  try {
    release(u);
  } catch (...) {  // its gather failed: whatever it wrote is freed unread
    units_[u]->gathering.reset();
    try {
      release(u);
    } catch (...) {
    }
  }
}

void FullyShardedModel::note_gathered() { peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes()); }

int64_t FullyShardedModel::gathered_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : full_) bytes += static_cast<int64_t>(p.storage().nbytes());
  return bytes;
}

int64_t FullyShardedModel::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : shards_) bytes += s.nbytes();
  return bytes;
}

std::size_t FullyShardedModel::cached_bytes() const { return blocks_->made_bytes(); }

c10::Device FullyShardedModel::device() const {
  return shards_.empty() ? c10::Device(c10::kCPU) : shards_.front().device();
}

}  // namespace basin
