#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace basin {

/// Inputs and integer class targets of a batch (or of one microbatch).
struct Batch {
  at::Tensor inputs;
  at::Tensor targets;
  /// Each sample's index in the training set (int64, on the CPU), the same on
  /// every rank: what per-sample memories (SAF's past outputs) are keyed by.
  /// Undefined where the samples have no identity (a hand-made batch).
  at::Tensor ids;
  int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
};

}  // namespace basin
