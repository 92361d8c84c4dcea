// Data-parallel gradient sync as backward runs: hooks mark gradients ready,
// ready buckets go out in order, finish_backward() brings the means back.
#include "basin/core/parallel/ddp/bucket_reducer.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/communication/flat_tensors.h"

namespace basin {

BucketReducer::BucketReducer(std::shared_ptr<Communicator> communicator, std::vector<at::Tensor> params,
                             Options options)
    : communicator_(std::move(communicator)), params_(std::move(params)), options_(options) {
  if (!options_.owners.empty() && options_.owners.size() != params_.size()) {
    throw std::invalid_argument("BucketReducer: " + std::to_string(options_.owners.size()) + " owners for " +
                                std::to_string(params_.size()) + " parameters");
  }
  for (const int owner : options_.owners) {
    if (owner < 0 || owner >= communicator_->world_size()) {
      throw std::invalid_argument("BucketReducer: owner " + std::to_string(owner) + " is not a rank of " +
                                  std::to_string(communicator_->world_size()));
    }
  }
  if (params_.empty() || communicator_->world_size() == 1) return;  // nothing to average
  std::vector<std::size_t> reversed(params_.size());
  for (std::size_t i = 0; i < reversed.size(); ++i) reversed[i] = reversed.size() - 1 - i;
  lay_out(reversed);
  // Hooks also without overlap: they record the arrival order, so that both ways share their buckets.
  // A parameter frozen now has no accumulator: its bucket waits for finish_backward().
  ready_hooks_ = GradientReadyHooks(params_, [this](std::size_t index) { mark_ready(index); });
}

BucketReducer::~BucketReducer() = default;

void BucketReducer::lay_out(const std::vector<std::size_t>& order) {
  // One open bucket per dtype and device; the first of each is the small one.
  struct Kind {
    at::ScalarType dtype;
    c10::Device device;
    std::size_t open_bucket = 0;
    int64_t bytes = 0;
    int64_t buckets = 0;
    bool open = false;
  };
  std::vector<Kind> kinds;
  std::vector<std::vector<std::size_t>> groups;
  for (const std::size_t index : order) {
    const at::Tensor& param = params_[index];
    auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const Kind& k) {
      return k.dtype == param.scalar_type() && k.device == param.device();
    });
    if (kind == kinds.end()) kind = kinds.insert(kinds.end(), Kind{param.scalar_type(), param.device()});
    if (!kind->open) {
      *kind = Kind{kind->dtype, kind->device, groups.size(), 0, kind->buckets + 1, true};
      groups.emplace_back();
    }
    groups[kind->open_bucket].push_back(index);
    kind->bytes += param.numel() * static_cast<int64_t>(param.element_size());
    const int64_t limit =
        kind->buckets == 1 ? std::min(options_.first_bucket_bytes, options_.bucket_bytes) : options_.bucket_bytes;
    if (kind->bytes >= limit) kind->open = false;
  }

  buckets_.clear();
  buckets_.resize(groups.size());
  bucket_of_.assign(params_.size(), 0);
  const std::size_t parts = to_owners() ? static_cast<std::size_t>(communicator_->world_size()) : 1;
  for (std::size_t b = 0; b < groups.size(); ++b) {
    Bucket& bucket = buckets_[b];
    const bool last = b + 1 == groups.size();
    // Each part's members together: one buffer per part.
    bucket.members = groups[b];
    std::stable_sort(bucket.members.begin(), bucket.members.end(),
                     [this](std::size_t x, std::size_t y) { return part_of(x) < part_of(y); });
    bucket.flagged.assign(last ? parts : 0, {});
    for (std::size_t i = 0; last && i < params_.size(); ++i) bucket.flagged[part_of(i)].push_back(i);
    std::size_t k = 0;
    for (std::size_t part = 0; part < parts; ++part) {
      int64_t numel = 0;
      for (; k < bucket.members.size() && part_of(bucket.members[k]) == part; ++k) {
        bucket_of_[bucket.members[k]] = b;
        bucket.offsets.push_back(numel);
        numel += params_[bucket.members[k]].numel();
      }
      if (last) {
        bucket.flag_offsets.push_back(numel);
        numel += static_cast<int64_t>(bucket.flagged[part].size());
      }
      bucket.part_numel.push_back(numel);
    }
    bucket.buffers.resize(parts);  // allocated at the first start: a pass that never syncs holds none
    bucket.pending = static_cast<int64_t>(bucket.members.size());
  }
  ready_.assign(params_.size(), false);
  had_gradient_.assign(params_.size(), false);
  next_bucket_ = 0;
}

bool BucketReducer::is_view_of(const at::Tensor& grad, const at::Tensor& slot) {
  return grad.defined() && slot.defined() && grad.data_ptr() == slot.data_ptr() && grad.is_contiguous();
}

std::size_t BucketReducer::part_of(std::size_t index) const {
  return to_owners() ? static_cast<std::size_t>(options_.owners[index]) : 0;
}

void BucketReducer::prepare_for_backward() {
  if (buckets_.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (armed_) throw std::logic_error("BucketReducer: prepare_for_backward() twice without finish_backward()");
  armed_ = true;
  started_during_backward_ = 0;
}

void BucketReducer::mark_ready(std::size_t index) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!armed_ || ready_[index]) return;  // a backward that does not sync, or a second call
  ready_[index] = true;
  if (!rebuilt_) arrival_.push_back(index);
  if (--buckets_[bucket_of_[index]].pending == 0 && options_.overlap) start_ready_buckets(lock);
}

void BucketReducer::start_ready_buckets(std::unique_lock<std::mutex>& /*held*/) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    start(buckets_[next_bucket_]);
    ++next_bucket_;
    ++started_during_backward_;
  }
}

void BucketReducer::start(Bucket& bucket) {
  at::NoGradGuard no_grad;
  const at::TensorOptions options = params_[bucket.members.front()].options().requires_grad(false);
  for (std::size_t part = 0; part < bucket.buffers.size(); ++part) {
    if (!bucket.buffers[part].defined()) bucket.buffers[part] = at::empty({bucket.part_numel[part]}, options);
  }
  const auto me = static_cast<std::size_t>(communicator_->rank());
  for (std::size_t k = 0; k < bucket.members.size(); ++k) {
    const std::size_t index = bucket.members[k];
    at::Tensor param = params_[index];
    const at::Tensor slot = bucket.buffers[part_of(index)].narrow(0, bucket.offsets[k], param.numel());
    // No gradient here: a zero, unless no rank has one (the flags say).
    had_gradient_[index] = param.grad().defined();
    const bool in_place = is_view_of(param.grad(), slot);  // backward accumulated into the bucket itself
    if (!in_place && param.grad().defined()) {
      slot.view(param.sizes()).copy_(param.grad());
    } else if (!in_place) {
      slot.zero_();
    }
    // ZeRO-2: the bucket holds it now; this rank gets its own back from its part.
    if (to_owners() && !(in_place && part_of(index) == me)) param.mutable_grad().reset();
  }
  // The last bucket starts after every other: which gradients exist here is known.
  for (std::size_t part = 0; part < bucket.flagged.size(); ++part) {
    std::vector<float> defined;
    for (const std::size_t i : bucket.flagged[part]) defined.push_back(had_gradient_[i] ? 1.0f : 0.0f);
    if (defined.empty()) continue;
    bucket.buffers[part]
        .narrow(0, bucket.flag_offsets[part], static_cast<int64_t>(defined.size()))
        .copy_(at::tensor(at::ArrayRef<float>(defined)));
  }
  bucket.in_flight = to_owners() ? communicator_->start_reduce_scatter_sum(bucket.buffers)
                                 : communicator_->start_all_reduce_sum(bucket.buffers.front());
}

void BucketReducer::finish_backward() {
  if (buckets_.empty()) return;
  std::unique_lock<std::mutex> lock(mutex_);
  const bool prepared = armed_;
  armed_ = false;
  while (next_bucket_ < buckets_.size()) {
    start(buckets_[next_bucket_]);
    ++next_bucket_;
  }
  lock.unlock();
  // Every bucket is waited for, even after one failed (a timeout): none is
  // left in flight over buffers the next backward writes; then the first
  // error, with the reducer ready for another backward.
  std::exception_ptr failed;
  for (auto& bucket : buckets_) {
    try {
      bucket.in_flight->wait();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
    bucket.in_flight.reset();
  }
  if (failed) {
    for (auto& bucket : buckets_) bucket.pending = static_cast<int64_t>(bucket.members.size());
    std::fill(ready_.begin(), ready_.end(), false);
    next_bucket_ = 0;
    std::rethrow_exception(failed);
  }

  // The part this rank received: its own (ZeRO-2), or the one part (DDP).
  const auto me = static_cast<std::size_t>(communicator_->rank());
  const std::size_t mine = to_owners() ? me : 0;
  // Whether any rank has each gradient of that part, read before the division below.
  std::vector<bool> anywhere(params_.size(), false);
  const Bucket& last = buckets_.back();
  const auto n = static_cast<int64_t>(last.flagged[mine].size());
  const at::Tensor flags = last.buffers[mine].narrow(0, last.flag_offsets[mine], n).to(at::kCPU, at::kFloat).contiguous();
  for (int64_t j = 0; j < n; ++j) anywhere[last.flagged[mine][static_cast<std::size_t>(j)]] = flags.data_ptr<float>()[j] > 0;

  const double world = static_cast<double>(communicator_->world_size());
  at::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    bucket.buffers[mine].div_(world);  // Gloo has no AVG: a sum, then a division
    for (std::size_t k = 0; k < bucket.members.size(); ++k) {
      const std::size_t index = bucket.members[k];
      if (part_of(index) != mine || !anywhere[index]) continue;  // another's, or no rank has one: as it is
      at::Tensor param = params_[index];
      const at::Tensor slot = bucket.buffers[mine].narrow(0, bucket.offsets[k], param.numel());
      if (is_view_of(param.grad(), slot)) continue;
      param.mutable_grad() = alias_of(slot, param.sizes());  // the gradient shares the bucket's memory from now on
    }
    bucket.pending = static_cast<int64_t>(bucket.members.size());
    for (std::size_t part = 0; part < bucket.buffers.size(); ++part) {
      if (part != mine) bucket.buffers[part] = at::Tensor();  // ZeRO-2 keeps nothing it does not own
    }
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_bucket_ = 0;
  if (prepared && !rebuilt_ && !ready_hooks_.empty()) rebuild_from_arrival_order();
}

void BucketReducer::rebuild_from_arrival_order() {
  rebuilt_ = true;
  std::vector<int64_t> order(arrival_.begin(), arrival_.end());
  std::vector<bool> seen(params_.size(), false);
  for (const std::size_t index : arrival_) seen[index] = true;
  for (std::size_t i = params_.size(); i-- > 0;) {
    if (!seen[i]) order.push_back(static_cast<int64_t>(i));
  }
  arrival_.clear();
  // On the parameters' device: NCCL takes CUDA tensors only.
  std::vector<at::Tensor> agreed{at::tensor(order, at::kLong).to(params_.front().device())};
  communicator_->broadcast(agreed, 0);
  const at::Tensor on_host = agreed.front().cpu();
  const int64_t* values = on_host.data_ptr<int64_t>();
  lay_out(std::vector<std::size_t>(values, values + on_host.numel()));
}

int64_t BucketReducer::buffer_bytes() const {
  int64_t bytes = 0;
  for (const auto& bucket : buckets_) {
    for (const auto& buffer : bucket.buffers) {
      if (buffer.defined()) bytes += buffer.numel() * static_cast<int64_t>(buffer.element_size());
    }
  }
  return bytes;
}

std::vector<std::vector<std::size_t>> BucketReducer::buckets() const {
  std::vector<std::vector<std::size_t>> out;
  for (const auto& bucket : buckets_) out.push_back(bucket.members);
  return out;
}

}  // namespace basin
