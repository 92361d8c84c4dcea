#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "basin/core/engine/state.h"

namespace basin {

/// Turns autocast on for `precision` on `device` for its lifetime, and puts
/// the previous autocast state back after (LibTorch has no C++ guard for it).
/// fp32 does nothing; amp_bf16 autocasts to bfloat16 (CPU and CUDA);
/// amp_fp16 to float16 (CUDA; CPU too where LibTorch's CPU autocast has
/// float16, see compat::kCpuAutocastFp16).
class AutocastGuard {
 public:
  AutocastGuard(Precision precision, c10::DeviceType device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool active_ = false;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

/// Parses "fp32", "amp_bf16" or "amp_fp16"; throws ConfigError naming `key`.
Precision precision_from_name(const std::string& name, const std::string& key);

}  // namespace basin
