#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/parallel/ddp/gradient_ready_hooks.h"

namespace torch::autograd { struct Node; }

namespace basin {

class Communicator;
class PendingCollective;

/// Averages gradients over ranks in buckets, as PyTorch DDP's Reducer does:
/// a hook on each parameter's gradient accumulator marks the gradient ready
/// as backward produces it, and a bucket's all-reduce starts as soon as all
/// of its gradients are ready, while backward goes on computing the rest.
///
/// Buckets follow the order gradients arrive in: at first the reverse of the
/// parameters' order (a model's last layers finish backward first), the
/// first bucket small so that communication starts early; after the first
/// synced backward, the order rank 0 saw (broadcast, so that every rank
/// starts the same buckets in the same order, as collectives must). A
/// bucket holds one dtype on one device. Buckets start strictly in order.
///
/// A parameter with no gradient on this rank (unused in this backward, or
/// used on other ranks only) counts as a zero gradient when another rank has
/// one; one that no rank has a gradient for keeps none. Which is which rides
/// in the last bucket (one flag per parameter), so that no extra collective
/// runs.
///
/// Gradients are replaced by their means in finish_backward(), when every
/// bucket has arrived: until then they hold this rank's own values. From
/// then on each gradient shares its bucket's memory (as PyTorch DDP's
/// gradient_as_bucket_view), so that later backward passes accumulate into
/// the buckets (no copy in or out, no second copy held), until something
/// replaces the gradient (a zero_grad that sets it to none, LibTorch 2.x's
/// default), when that pass copies it in again.
///
/// With owners (ZeRO-2), each bucket is reduce-scattered instead: its
/// members are laid out by owner, one buffer per owner's part, each part
/// summed onto its owner alone, and a rank drops every gradient as soon as
/// it is in its bucket (gradient memory never doubles). After
/// finish_backward() a rank holds the means of the gradients it owns, in its
/// own parts, and nothing else; the flags ride at the tail of each owner's
/// part of the last bucket.
class BucketReducer {
 public:
  struct Options {
    /// Bytes a bucket holds, about (a tensor is never split).
    int64_t bucket_bytes = 25 << 20;
    /// The first bucket of each dtype and device: small, so that the first
    /// all-reduce starts early in backward (PyTorch DDP's 1 MiB).
    int64_t first_bucket_bytes = 1 << 20;
    /// Start buckets from backward's hooks. False: every bucket starts in
    /// finish_backward() (the same buckets, rebuilt alike, and the same
    /// sums, without overlap).
    bool overlap = true;
    /// ZeRO-2: the rank that owns each parameter (one per parameter, the
    /// same on every rank). Empty: every rank gets every mean.
    std::vector<int> owners;
  };

  /// `params`: the same tensors on every rank, each once.
  BucketReducer(std::shared_ptr<Communicator> communicator, std::vector<at::Tensor> params, Options options);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  /// The next backward is to be synced: its hooks start buckets (a backward
  /// run without this call, such as an earlier microbatch's, is rank-local).
  void prepare_for_backward();
  /// After that backward: starts the buckets its hooks did not, waits for
  /// all, and replaces each gradient by its mean over ranks. Also works
  /// without prepare_for_backward() (everything starts here).
  void finish_backward();

  const std::vector<at::Tensor>& parameters() const { return params_; }
  /// Each bucket's parameters (indices into parameters()), in start order.
  std::vector<std::vector<std::size_t>> buckets() const;
  /// Bytes the buckets' buffers hold now. The gradients live in them once
  /// synced (DDP: every gradient; ZeRO-2: only this rank's part of each
  /// bucket, the others freed), so these bytes are no second copy.
  int64_t buffer_bytes() const;
  /// Buckets the last synced backward started from its hooks, before it ended.
  int64_t started_during_backward() const { return started_during_backward_; }

 private:
  struct Bucket {
    std::vector<std::size_t> members;  // laid out part by part
    std::vector<int64_t> offsets;      // of each member in its part's buffer
    std::vector<int64_t> part_numel;   // one part (all-reduce), or one per owner (reduce-scatter)
    std::vector<std::vector<std::size_t>> flagged;  // last bucket: each part's flags, one per parameter it owns
    std::vector<int64_t> flag_offsets;              // where each part's flags begin in its buffer
    std::vector<at::Tensor> buffers;   // one per part: the members' gradients, then the flags
    int64_t pending = 0;               // members not ready yet in this backward
    std::unique_ptr<PendingCollective> in_flight;
  };

  void lay_out(const std::vector<std::size_t>& order);
  void mark_ready(std::size_t index);
  void start_ready_buckets(std::unique_lock<std::mutex>& lock);
  void start(Bucket& bucket);
  /// The part a parameter's gradient is summed onto: its owner, or the one part.
  std::size_t part_of(std::size_t index) const;
  bool to_owners() const { return !options_.owners.empty(); }
  /// Whether `grad` already lives in `slot` of a bucket (same start; the sizes agree by construction).
  static bool is_view_of(const at::Tensor& grad, const at::Tensor& slot);
  /// Every rank takes rank 0's arrival order of the first synced backward.
  void rebuild_from_arrival_order();

  std::shared_ptr<Communicator> communicator_;
  std::vector<at::Tensor> params_;
  Options options_;
  GradientReadyHooks ready_hooks_;

  std::mutex mutex_;  // hooks may run on autograd's device threads
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // parameter -> bucket
  std::vector<bool> ready_;
  std::vector<bool> had_gradient_;  // as each bucket started (ZeRO-2 drops what it does not own then)
  std::vector<std::size_t> arrival_;  // parameters in the order the first synced backward produced them
  std::size_t next_bucket_ = 0;
  bool armed_ = false;
  bool rebuilt_ = false;
  int64_t started_during_backward_ = 0;
};

}  // namespace basin
