#include "basin/core/train/autocast.h"

#include <ATen/autocast_mode.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/config/config_error.h"

namespace basin {

AutocastGuard::AutocastGuard(Precision precision, c10::DeviceType device) : device_(device) {
  if (precision == Precision::kFp32) return;
  active_ = true;
  const at::ScalarType dtype = precision == Precision::kAmpFp16 ? at::kHalf : at::kBFloat16;
  previous_enabled_ = compat::autocast_enabled(device);
  previous_dtype_ = compat::autocast_dtype(device);
  compat::set_autocast_enabled(device, true);
  compat::set_autocast_dtype(device, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Casts are cached while autocast is on; the outermost exit drops them, as Python's autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast_enabled(device_, previous_enabled_);
  compat::set_autocast_dtype(device_, previous_dtype_);
}

Precision precision_from_name(const std::string& name, const std::string& key) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "amp_bf16") return Precision::kAmpBf16;
  if (name == "amp_fp16") return Precision::kAmpFp16;
  throw ConfigError("config key '" + key + "': expected one of fp32, amp_bf16, amp_fp16, got \"" + name + "\"");
}

}  // namespace basin
