#pragma once

// Whether this machine computes the config's low precision fast. A CPU
// without bf16 instructions (no AVX512-BF16 or AMX) runs LibTorch's bf16
// matrix products on generic kernels, measured 88x slower than fp32 under
// LibTorch 2.11 on a 2-core AMD EPYC: GPT-2 small's step took 251 s against
// 11.6 s. Nothing else would tell the user, so basin-train times one small
// product in both formats before training and warns, as it does for the
// reference BLAS.

#include <functional>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "basin/core/engine/state.h"

namespace basin {

/// Seconds one product of the probe's size takes in `dtype` on the CPU.
using ProductTimer = std::function<double(at::ScalarType dtype)>;

/// The probe: a [64 x 256] x [256 x 256] product (8.4 MFLOP: 0.1 ms in fp32
/// at 74 GFLOP/s, 9 ms at generic bf16's 0.9), the least of a few runs, each
/// format's runs ending once they have taken 15 ms, so the check costs at
/// most about 50 ms of start-up. Throws where LibTorch has no CPU kernel for
/// `dtype` (fp16 under 1.13).
double time_cpu_product(at::ScalarType dtype);

/// A low-precision product this many times slower than fp32's is warned of.
constexpr double kSlowLowPrecisionRatio = 2.0;

/// The warning for `precision` on `device`, or "" where there is nothing to
/// say: fp32, a device other than the CPU (a GPU's bf16 is fast), a format
/// at most kSlowLowPrecisionRatio times slower than fp32, or one the CPU
/// cannot multiply at all (the run fails on its own then, saying why).
/// `timer` is the seam a test fakes.
std::string low_precision_speed_warning(Precision precision, const c10::Device& device,
                                        const ProductTimer& timer = time_cpu_product);

}  // namespace basin
