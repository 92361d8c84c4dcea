#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

namespace basin::bench {

/// Replaces LibTorch's CPU allocator with one that counts the bytes tensors
/// hold, so a benchmark can report the peak memory of a step (LibTorch 1.13
/// keeps no CPU statistics). Some callers require the data pointer to be its
/// own context, so sizes are kept in a side table.
class TrackingAllocator : public c10::Allocator {
 public:
  /// Installs itself as the CPU allocator (once per process).
  static TrackingAllocator& install() {
    static TrackingAllocator allocator;
    static const bool installed = (c10::SetCPUAllocator(&allocator, /*priority=*/100), true);
    (void)installed;
    return allocator;
  }

  // LibTorch 2.x dropped allocate()'s const and made copy_data() required:
  // one of the two allocate() overloads overrides, whichever this LibTorch has.
  c10::DataPtr allocate(size_t bytes) { return allocate_bytes(bytes); }
  c10::DataPtr allocate(size_t bytes) const { return allocate_bytes(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

  c10::DataPtr allocate_bytes(size_t bytes) const {
    void* data = c10::alloc_cpu(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[data] = bytes;
      current_ += bytes;
      if (on_allocate_ != nullptr) on_allocate_(data, bytes);
      if (current_ > peak_ && on_new_peak_ != nullptr) on_new_peak_(bytes, current_, sizes_);
      peak_ = std::max(peak_, current_);
    }
    return {data, data, &TrackingAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &TrackingAllocator::release; }

  size_t current() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_;
  }
  size_t peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  /// Called (under the allocator's lock) with the size of each allocation that raises the peak, and the bytes held.
  using Sizes = std::unordered_map<void*, size_t>;
  static void on_new_peak(void (*callback)(size_t bytes, size_t current, const Sizes& held)) { on_new_peak_ = callback; }

  /// Called (under the allocator's lock) with every allocation.
  static void on_allocate(void (*callback)(void* data, size_t bytes)) { on_allocate_ = callback; }

  /// Called (under the allocator's lock) with every release, and the bytes held after it.
  static void on_release(void (*callback)(void* data, size_t bytes, size_t current)) { on_release_ = callback; }

  /// Starts a new peak measurement from what is held now.
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
  }

 private:
  static void release(void* data) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = sizes_.find(data);
      if (it != sizes_.end()) {
        if (on_release_ != nullptr) on_release_(data, it->second, current_ - it->second);
        current_ -= it->second;
        sizes_.erase(it);
      }
    }
    c10::free_cpu(data);
  }

  static inline std::mutex mutex_;
  static inline std::unordered_map<void*, size_t> sizes_;
  static inline size_t current_ = 0;
  static inline size_t peak_ = 0;
  static inline void (*on_allocate_)(void*, size_t) = nullptr;
  static inline void (*on_release_)(void*, size_t, size_t) = nullptr;
  static inline void (*on_new_peak_)(size_t, size_t, const std::unordered_map<void*, size_t>&) = nullptr;
};

}  // namespace basin::bench
