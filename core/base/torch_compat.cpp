#include "basin/core/base/torch_compat.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

namespace basin::compat {

#if BASIN_TORCH_AT_LEAST(2, 4)

bool autocast_enabled(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
void set_autocast_enabled(c10::DeviceType device, bool enabled) { at::autocast::set_autocast_enabled(device, enabled); }
at::ScalarType autocast_dtype(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
void set_autocast_dtype(c10::DeviceType device, at::ScalarType dtype) { at::autocast::set_autocast_dtype(device, dtype); }

#else

bool autocast_enabled(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_autocast_enabled(c10::DeviceType device, bool enabled) {
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
}
at::ScalarType autocast_dtype(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
}
void set_autocast_dtype(c10::DeviceType device, at::ScalarType dtype) {
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}

#endif

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout) {
#if BASIN_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true);
#else
  const int64_t t = q.size(-2);
  const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  const at::Tensor future = at::ones({t, t}, at::TensorOptions(at::kBool).device(q.device())).triu(1);
  at::Tensor weights = at::softmax(scores.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  if (dropout > 0) weights = at::dropout(weights, dropout, /*train=*/true);
  return at::matmul(weights, v);
#endif
}

const char* torch_version() { return TORCH_VERSION; }

}  // namespace basin::compat
