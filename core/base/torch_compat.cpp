#include "basin/core/base/torch_compat.h"

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

const char* torch_version() { return TORCH_VERSION; }

}  // namespace basin::compat
