#pragma once

// Where a training step's memory peaks (step_timer's --memory-trace). For
// every event of one step: the process's largest resident memory since the
// event before (sampled every millisecond from /proc/self/statm), the bytes
// tensors held (the most since, and at the event) and malloc's heap, so that
// a peak is put on a phase and split into tensors and what malloc keeps.
// Then the step's most tensor bytes: every tensor of 16 MiB or more held
// then, and where each was made.
//   BASIN_TRACE_ALL=1       every step's events up to the traced one
//   BASIN_TRACE_TIMELINE=1  each tensor of 16 MiB or more made and freed, in order
//   BASIN_TRACE_FRAMES=1    LibTorch's frames too, not only basin's

#include <execinfo.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "basin/core/engine/callback.h"
#include "tracking_allocator.h"

namespace basin::bench {

class MemoryTrace : public basin::Callback {
 public:
  /// Traces the step numbered `step` (from 0); the others pass untraced.
  explicit MemoryTrace(int64_t step) : step_(step), tensors_(TrackingAllocator::install()) {
    TrackingAllocator::on_new_peak(&MemoryTrace::new_peak);
    TrackingAllocator::on_allocate(&MemoryTrace::allocated);
    TrackingAllocator::on_release(&MemoryTrace::released);
    sampler_ = std::thread([this] {
      while (!stop_) {
        const double rss = resident_mib();
        {
          std::lock_guard<std::mutex> lock(mutex_);
          rss_peak_ = std::max(rss_peak_, rss);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~MemoryTrace() override {
    stop_ = true;
    sampler_.join();
  }
  std::string name() const override { return "memory_trace"; }

  bool on_after_sharding(const State&, Logger&) override { return mark("after_sharding"), false; }
  bool on_fit_start(const State&, Logger&) override { return mark("fit_start"), false; }
  bool on_batch_start(const State&, Logger&) override { return mark("batch_start"), false; }
  bool on_before_forward(const State&, Logger&) override { return mark("before_forward"), false; }
  bool on_after_forward(const State&, Logger&) override { return mark("after_forward"), false; }
  bool on_after_loss(const State&, Logger&) override { return mark("after_loss"), false; }
  bool on_before_backward(const State&, Logger&) override { return mark("before_backward"), false; }
  bool on_after_backward(const State&, Logger&) override { return mark("after_backward"), false; }
  bool on_before_step(const State&, Logger&) override { return mark("before_step"), false; }
  bool on_after_step(const State&, Logger&) override { return mark("after_step"), false; }
  bool on_batch_end(const State&, Logger&) override {
    mark("batch_end");
    if (batches_++ == step_) {
      tracing_ = false;  // the traced step is over, however many follow
      print();
    }
    return false;
  }

 private:
  static constexpr double kMiB = 1 << 20;
  static constexpr size_t kLarge = 16 << 20;  // the tensors whose making is recorded

  struct Row {
    std::string event;
    double rss_peak_mib;     // the most resident since the event before
    double tensor_peak_mib;  // the most tensor bytes since the event before
    double tensor_mib;       // tensor bytes at the event
    double heap_mib;         // malloc's arenas (the brk heap and the threads' heaps)
    double heap_free_mib;    // of which free, kept for reuse
    double mapped_mib;       // malloc's own mappings (blocks over its mmap threshold)
    double file_mib;         // resident file pages: the libraries' code and data
  };
  struct Frames {
    void* at[64];
    int depth = 0;
  };
  struct Change {  // a large tensor made or freed
    bool made;
    size_t bytes, after;
    Frames frames;
  };

  // Set by the trainer's thread, read as any thread allocates.
  static inline std::atomic<bool> tracing_{false};
  static inline std::atomic<const char*> last_event_{""};
  // Written under the tracking allocator's lock, read once the step is over.
  static inline std::unordered_map<void*, Frames> made_at_;  // of every large tensor made while tracing
  static inline std::vector<Change> timeline_;
  static inline size_t step_peak_ = 0;
  static inline const char* step_peak_event_ = "";
  static inline std::vector<size_t> peak_held_;  // the tensors of 1 MiB or more held at the step's peak
  static inline std::vector<std::pair<size_t, Frames>> peak_large_;

  static void allocated(void* data, size_t bytes) {
    if (bytes < kLarge || !tracing_) return;
    Frames& frames = made_at_[data];
    frames.depth = ::backtrace(frames.at, 64);
    if (std::getenv("BASIN_TRACE_TIMELINE")) timeline_.push_back({true, bytes, 0, frames});
  }
  static void released(void* /*data*/, size_t bytes, size_t after) {
    if (bytes < kLarge || !tracing_ || !std::getenv("BASIN_TRACE_TIMELINE")) return;
    Change change{false, bytes, after, {}};
    change.frames.depth = ::backtrace(change.frames.at, 64);
    timeline_.push_back(change);
  }
  static void new_peak(size_t /*bytes*/, size_t current, const TrackingAllocator::Sizes& held) {
    if (!tracing_ || current <= step_peak_) return;
    step_peak_ = current;
    step_peak_event_ = last_event_.load();
    peak_held_.clear();
    peak_large_.clear();
    for (const auto& [data, bytes] : held) {
      if (bytes >= (1 << 20)) peak_held_.push_back(bytes);
      if (bytes < kLarge) continue;
      const auto found = made_at_.find(data);
      peak_large_.emplace_back(bytes, found != made_at_.end() ? found->second : Frames{});
    }
  }

  static double resident_mib() {
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    statm >> pages >> resident;
    return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / kMiB;
  }
  static double status_mib(const std::string& key) {
    std::ifstream status("/proc/self/status");
    for (std::string word; status >> word;) {
      if (word != key) continue;
      double kib = 0;
      status >> kib;
      return kib / 1024;
    }
    return 0;
  }

  /// The named frames of a backtrace (basin's, or every C++ one), mangled: c++filt reads them.
  static void print_frames(const Frames& frames, int most) {
    char** where = ::backtrace_symbols(frames.at, frames.depth);
    const char* prefix = std::getenv("BASIN_TRACE_FRAMES") ? "(_ZN" : "(_ZN5basin";
    int shown = 0;
    for (int i = 0; i < frames.depth && shown < most; ++i) {
      const char* name = std::strstr(where[i], prefix);
      if (name == nullptr) continue;
      const std::string symbol(name + 1, std::strcspn(name + 1, "+)"));
      if (symbol.find("TrackingAllocator") != std::string::npos || symbol.find("MemoryTrace") != std::string::npos) {
        continue;
      }
      std::fprintf(stderr, " %s", symbol.c_str());
      ++shown;
    }
    std::fprintf(stderr, frames.depth == 0 ? " (before the step)\n" : "\n");
    std::free(where);
  }

  void mark(const char* event) {
    last_event_ = event;
    tracing_ = batches_ == step_;
    double rss_peak = resident_mib();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      rss_peak = std::max(rss_peak, rss_peak_);
      rss_peak_ = 0;
    }
    if (batches_ == step_ || (batches_ < step_ && std::getenv("BASIN_TRACE_ALL"))) {
      const struct mallinfo2 heap = ::mallinfo2();
      rows_.push_back({event, rss_peak, tensors_.peak() / kMiB, tensors_.current() / kMiB, heap.arena / kMiB,
                       heap.fordblks / kMiB, heap.hblkhd / kMiB, status_mib("RssFile:")});
    }
    tensors_.reset_peak();
  }

  void print() const {
    std::fprintf(stderr, "memory trace to step %lld, MiB: the most since the event before, and at the event\n",
                 static_cast<long long>(step_));
    std::fprintf(stderr, "  %-16s %9s %12s %8s %8s %10s %8s %6s\n", "event", "resident", "tensors most", "tensors",
                 "heap", "heap free", "mmapped", "files");
    for (const Row& row : rows_) {
      std::fprintf(stderr, "  %-16s %9.0f %12.0f %8.0f %8.0f %10.0f %8.0f %6.0f\n", row.event.c_str(), row.rss_peak_mib,
                   row.tensor_peak_mib, row.tensor_mib, row.heap_mib, row.heap_free_mib, row.mapped_mib, row.file_mib);
    }
    std::vector<size_t> held = peak_held_;
    std::sort(held.rbegin(), held.rend());
    double small = static_cast<double>(step_peak_) / kMiB;
    std::fprintf(stderr, "step %lld's most tensor bytes, %.0f MiB, after %s; tensors of 1 MiB or more then:",
                 static_cast<long long>(step_), small, step_peak_event_);
    for (const size_t bytes : held) {
      std::fprintf(stderr, " %.1f", static_cast<double>(bytes) / kMiB);
      small -= static_cast<double>(bytes) / kMiB;
    }
    std::fprintf(stderr, "; smaller ones: %.0f\n", small);
    for (const auto& [bytes, frames] : peak_large_) {
      std::fprintf(stderr, "  %.1f MiB made at:", static_cast<double>(bytes) / kMiB);
      print_frames(frames, 64);
    }
    for (const Change& change : timeline_) {
      std::fprintf(stderr, "  %s %.1f MiB", change.made ? "made " : "freed", static_cast<double>(change.bytes) / kMiB);
      if (!change.made) std::fprintf(stderr, " (to %.0f)", static_cast<double>(change.after) / kMiB);
      std::fprintf(stderr, ":");
      print_frames(change.frames, 6);
    }
  }

  const int64_t step_;
  TrackingAllocator& tensors_;
  int64_t batches_ = 0;
  std::vector<Row> rows_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  double rss_peak_ = 0;
  std::thread sampler_;
};

}  // namespace basin::bench
