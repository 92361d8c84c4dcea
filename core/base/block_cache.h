#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

namespace basin {

/// Keeps the CPU blocks it hands out when their last user lets them go, and
/// hands them out again for requests of the same size, as a GPU's caching
/// allocator does. For blocks that come and go many times a step in a few
/// sizes (zero3's gathered units and reduce parts): freed into malloc's heap
/// they leave holes among the blocks that outlive them, which nothing of
/// their size refills in time, and the heap grows by what it cannot reuse.
/// Kept here, the same few blocks serve every step, and none is faulted in
/// afresh. It holds, lent and kept together, no more than twice the most it
/// ever lent at once: a new block frees kept ones of other sizes, the oldest
/// first (units of many shapes could otherwise keep a block of each, a
/// whole model's worth).
/// Blocks above kLargestHeapBlock are not kept: malloc maps those apart
/// from its heap and unmaps them when freed, so they leave no holes, and
/// kept they would stay resident where the step does not need them.
/// Thread-safe: a block may come back on any thread (autograd's).
class BlockCache {
 public:
  BlockCache();
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  /// A block of exactly `bytes` on the CPU: a kept one, or a new one. It
  /// comes back to this cache when the DataPtr (or the storage holding it)
  /// is destroyed; after the cache, it is freed then.
  c10::DataPtr take(std::size_t bytes);
  /// A 1-D tensor of `numel` elements of `dtype` (uninitialized) on a block from take().
  at::Tensor empty(int64_t numel, at::ScalarType dtype);

  /// Frees every kept block, and starts the bound above afresh from what is
  /// lent now: after a rare use (every unit gathered for an export) that the
  /// steps after it do not repeat.
  void free_kept();

  /// Bytes of the blocks this cache has made to keep (handed out or kept), and of those kept now.
  std::size_t made_bytes() const;
  std::size_t kept_bytes() const;

  struct Shelves;  // the kept blocks, by size

 private:
  std::shared_ptr<Shelves> shelves_;  // blocks handed out hold it weakly: they may outlive the cache
};

}  // namespace basin
