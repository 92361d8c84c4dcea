#include "basin/core/base/block_cache.h"

#include <algorithm>
#include <list>
#include <mutex>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/base/memory_reuse.h"

namespace basin {

struct BlockCache::Shelves {
  struct Kept {
    std::size_t bytes;
    c10::DataPtr block;
  };
  mutable std::mutex mutex;
  std::list<Kept> kept;  // the oldest returned first
  std::size_t made = 0, kept_bytes = 0, lent = 0, most_lent = 0;
};

namespace {

// What the cache may hold, lent and kept, against the most it lent at once:
// a step needs blocks of other sizes at other moments (gathers ahead in
// forward, gradients and reduce parts in backward), and with no room for
// both mixes it would free and make blocks every step.
constexpr std::size_t kHeadroom = 2;

/// A block out of the cache: its allocation, and where it goes back to.
struct Lent {
  std::weak_ptr<BlockCache::Shelves> shelves;
  std::size_t bytes;
  c10::DataPtr block;
};

void bring_back(void* context) {
  std::unique_ptr<Lent> lent(static_cast<Lent*>(context));
  if (const auto shelves = lent->shelves.lock()) {
    std::lock_guard<std::mutex> lock(shelves->mutex);
    shelves->lent -= lent->bytes;
    shelves->kept.push_back({lent->bytes, std::move(lent->block)});
    shelves->kept_bytes += lent->bytes;
  }  // else the cache is gone: the block is freed with `lent`
}

}  // namespace

BlockCache::BlockCache() : shelves_(std::make_shared<Shelves>()) {}

BlockCache::~BlockCache() = default;

c10::DataPtr BlockCache::take(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(kLargestHeapBlock)) return c10::GetAllocator(c10::kCPU)->allocate(bytes);
  auto lent = std::make_unique<Lent>(Lent{shelves_, bytes, c10::DataPtr()});
  std::vector<c10::DataPtr> evicted;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lock(shelves_->mutex);
    Shelves& s = *shelves_;
    // The most recently returned block of this size: the likeliest to be resident still.
    const auto found = std::find_if(s.kept.rbegin(), s.kept.rend(), [&](const Shelves::Kept& k) { return k.bytes == bytes; });
    if (found != s.kept.rend()) {
      lent->block = std::move(found->block);
      s.kept.erase(std::next(found).base());
      s.kept_bytes -= bytes;
    } else {
      // A new block: kept ones of other sizes go, the oldest first, so that
      // the cache never holds more than twice the most it ever lent at once.
      const std::size_t bound = std::max(kHeadroom * s.most_lent, s.lent + bytes);
      while (!s.kept.empty() && s.kept_bytes + s.lent + bytes > bound) {
        s.kept_bytes -= s.kept.front().bytes;
        evicted.push_back(std::move(s.kept.front().block));
        s.kept.pop_front();
      }
      s.made += bytes;
    }
    s.lent += bytes;
    s.most_lent = std::max(s.most_lent, s.lent);
  }
  evicted.clear();
  if (!lent->block) lent->block = c10::GetAllocator(c10::kCPU)->allocate(bytes);
  void* data = lent->block.get();
  return c10::DataPtr(data, lent.release(), &bring_back, c10::Device(c10::kCPU));
}

at::Tensor BlockCache::empty(int64_t numel, at::ScalarType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(numel) * c10::elementSize(dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, take(bytes), /*allocator=*/nullptr, /*resizable=*/false);
  at::Tensor tensor = at::empty({0}, at::TensorOptions().dtype(dtype));
  return tensor.set_(std::move(storage), 0, {numel}, {1});
}

void BlockCache::free_kept() {
  std::list<Shelves::Kept> freed;
  {
    std::lock_guard<std::mutex> lock(shelves_->mutex);
    freed.swap(shelves_->kept);
    shelves_->kept_bytes = 0;
    shelves_->most_lent = shelves_->lent;
  }
}

std::size_t BlockCache::made_bytes() const {
  std::lock_guard<std::mutex> lock(shelves_->mutex);
  return shelves_->made;
}

std::size_t BlockCache::kept_bytes() const {
  std::lock_guard<std::mutex> lock(shelves_->mutex);
  return shelves_->kept_bytes;
}

}  // namespace basin
