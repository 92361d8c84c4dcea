#include "basin/core/train/autocast.h"

#include <ATen/autocast_mode.h>

#include "basin/core/config_error.h"

namespace basin {

AutocastGuard::AutocastGuard(Precision precision, c10::DeviceType device) {
  if (precision == Precision::kFp32) return;
  active_ = true;
  cuda_ = device == c10::DeviceType::CUDA;
  const at::ScalarType dtype = precision == Precision::kAmpFp16 ? at::kHalf : at::kBFloat16;
  if (cuda_) {
    previous_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    previous_enabled_ = at::autocast::is_cpu_enabled();
    previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Casts are cached while autocast is on; the outermost exit drops them, as Python's autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (cuda_) {
    at::autocast::set_enabled(previous_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
  } else {
    at::autocast::set_cpu_enabled(previous_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
}

Precision precision_from_name(const std::string& name, const std::string& key) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "amp_bf16") return Precision::kAmpBf16;
  if (name == "amp_fp16") return Precision::kAmpFp16;
  throw ConfigError("config key '" + key + "': expected one of fp32, amp_bf16, amp_fp16, got \"" + name + "\"");
}

}  // namespace basin
