#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace basin {

/// The seed of one tensor's noise at one step of a run: the same on every
/// rank, different for every (run seed, step, parameter).
uint64_t noise_seed(uint64_t run_seed, int64_t step, int64_t parameter);

/// Standard normal float32 values for rows [first_row, first_row + rows) of
/// a tensor of `row_numel` values a row, on the CPU. Each row is its own
/// Philox stream, keyed by `seed` and counted from the row: whichever rows a
/// rank holds (zero3 splits parameters by rows), it draws what one process
/// draws for them, and the noise is regenerated from the seed rather than
/// stored. The values depend on the CPU's vectorized log and sin/cos, so
/// they are the same on one machine, not necessarily across CPU kinds.
at::Tensor seeded_normal_rows(uint64_t seed, int64_t first_row, int64_t rows, int64_t row_numel);

}  // namespace basin
