#include "basin/core/train/what_computes.h"

#include <ATen/Parallel.h>

#include "basin/core/base/blas.h"
#include "basin/core/base/console.h"
#include "basin/core/base/torch_compat.h"
#include "basin/core/train/low_precision_speed.h"

namespace basin {

void say_what_computes(const JobEnvironment& job, const State& state) {
  const BlasInfo blas = blas_info();
  if (job.rank == 0) {
    const int threads = at::get_num_threads();
    console::info(std::string("LibTorch ") + compat::torch_version() + " on " + blas.describe() + ", " +
                  std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
                  (job.world_size > 1 ? " per rank" : ""));
  }
  if (job.local_rank != 0) return;
  if (blas.reference) {
    console::warn("WARNING: LibTorch's matrix products run on netlib's REFERENCE BLAS (" + blas.library +
                  "), about 20x slower than an optimized BLAS. Fix: " + kInstallOptimizedBlas);
  }
  const std::string slow = low_precision_speed_warning(state.precision, state.device);
  if (!slow.empty()) console::warn(slow);
}

}  // namespace basin
