#pragma once

// What LibTorch computes with, said before training: the BLAS and its
// threads once per job, and loudly, on each node, where the matrix products
// will be slow: netlib's reference BLAS (a fresh Debian's libblas.so.3, about
// 20x slower), or a low precision the CPU computes over twice as slowly as
// fp32 (bf16 without bf16 instructions: low_precision_speed.h).

#include "basin/core/communication/rendezvous.h"
#include "basin/core/engine/state.h"

namespace basin {

/// Says it on the console: the line on rank 0, the warnings on each local rank 0.
void say_what_computes(const JobEnvironment& job, const State& state);

}  // namespace basin
