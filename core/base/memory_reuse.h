#pragma once

#include <malloc.h>

namespace basin {

// Glibc's largest mmap threshold: blocks up to this size come from the heap.
constexpr int kLargestHeapBlock = 32 << 20;

/// Makes glibc's malloc keep freed memory for reuse instead of handing it
/// back to the operating system. A training step frees and reallocates the
/// same large blocks every step (activations; gradients too, since LibTorch
/// 2.x's zero_grad frees them); with glibc's defaults, blocks above its
/// (adaptive) mmap threshold are unmapped when freed and faulted in again
/// when reallocated, and a heap top above the trim threshold is returned.
/// Measured on the small CNN at batch 128, 1 thread: steps about 10% faster,
/// and step times that no longer depend on the heap's history (SAM/SGD
/// through the trainer wandered from 1.7 to 2.3 across runs; now 1.96-2.0).
/// A program calls it (basin-train, the benchmarks): the library never does,
/// since how a process's heap behaves is not for a library to decide.
/// GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824
/// does the same from outside a process.
inline void keep_freed_memory_for_reuse() {
  mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

/// Hands the pages of the heap's freed blocks back to the operating system
/// (glibc's malloc_trim): memory kept for reuse stops being resident until
/// it is used again, where it is faulted in afresh. Blocks freed between a
/// step's passes keep the heap's pages of every tensor that passed through
/// them, and holes where long-lived tensors were made amid short-lived ones
/// keep more; zero3 calls it before each backward (its
/// `parallel.return_freed_memory`, a user's choice), where a step peaks.
inline void return_freed_memory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace basin
