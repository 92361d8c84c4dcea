#pragma once

// FullyShardedModel's per-unit state and a parameter's rows, shared by its
// forward and backward sides. Internal to core/parallel/zero3: not installed.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/parallel/zero3/fully_sharded_model.h"

namespace basin {
namespace zero3_rows {

// A parameter is sharded by its first dimension: rows_of rows of row_numel elements.
inline int64_t rows_of(const at::Tensor& p) { return p.dim() == 0 ? 1 : p.size(0); }

inline int64_t row_numel(const at::Tensor& p) {
  if (p.dim() == 0) return 1;
  int64_t n = 1;
  for (int64_t d = 1; d < p.dim(); ++d) n *= p.size(d);
  return n;
}

}  // namespace zero3_rows

struct FullyShardedModel::Unit {
  std::string name;
  std::vector<std::size_t> params;
  std::vector<int64_t> part_numel;  // per rank: elements of its rows of every parameter
  at::TensorOptions options;  // of its parameters whole: what a gather moves
  at::ScalarType reduce_dtype = at::kFloat;  // what its reduce-scatter sums in
  bool gathered = false;
  std::unique_ptr<PendingCollective> gathering;
  bool mixed = false;        // frozen and trainable parameters (LoRA): whole to backward's end
  std::size_t hooked = 0;    // parameters whose accumulator has a hook
  std::size_t fired = 0;     // of which accumulated in this backward
  bool reduce_started = false;
  std::vector<at::Tensor> reduce_parts;
  std::unique_ptr<PendingCollective> reducing;
  // HSDP: this rank's reduced part, being summed over the replicas until backward's end.
  at::Tensor replica_sum;
  std::unique_ptr<PendingCollective> replicating;
};

}  // namespace basin
