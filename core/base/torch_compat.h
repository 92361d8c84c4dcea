#pragma once

// What differs between the LibTorch versions basin builds against (Debian's
// 1.13 and the 2.x releases), in one place: code elsewhere asks these names
// instead of testing versions itself.

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

#define BASIN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace c10d {
class Backend;
class ProcessGroup;
}  // namespace c10d

namespace basin::compat {

/// The c10d class that Gloo's and NCCL's process groups derive from, and
/// that carries the collectives: ProcessGroup in 1.x, Backend since 2.0.
#if BASIN_TORCH_AT_LEAST(2, 0)
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

/// ATen's fused loss-scaling kernels (_amp_foreach_non_finite_check_and_unscale_,
/// _amp_update_scale_) have CPU kernels since 2.3; CUDA has always had them.
constexpr bool kFusedAmpKernelsOnCpu = BASIN_TORCH_AT_LEAST(2, 3);
inline bool fused_amp_kernels_on(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA || (device == c10::DeviceType::CPU && kFusedAmpKernelsOnCpu);
}

/// CPU autocast to float16: 1.13 knows only bfloat16 on CPU. Listed in
/// PyTorch's autocast documentation from 2.5 on (built and tested here on 2.11).
constexpr bool kCpuAutocastFp16 = BASIN_TORCH_AT_LEAST(2, 5);

/// Autocast state of one device type (the API became device-generic in 2.4
/// and the per-device calls are deprecated there).
bool autocast_enabled(c10::DeviceType device);
void set_autocast_enabled(c10::DeviceType device, bool enabled);
at::ScalarType autocast_dtype(c10::DeviceType device);
void set_autocast_dtype(c10::DeviceType device, at::ScalarType dtype);

/// Causal self-attention of q, k, v [batch, heads, T, head_dim]: softmax(q
/// k^T / sqrt(head_dim)) masked to the past, times v, with dropout on the
/// weights when `dropout` > 0. at::scaled_dot_product_attention (its fused
/// kernels) where the LibTorch has it (2.0 on), the explicit product on 1.13.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout);

/// The LibTorch version basin was compiled against, e.g. "2.11.0".
const char* torch_version();

}  // namespace basin::compat
