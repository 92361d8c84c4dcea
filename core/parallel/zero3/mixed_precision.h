#pragma once

#include <optional>
#include <string>

#include <c10/core/ScalarType.h>

namespace basin {

class Params;
enum class Precision;  // basin/core/engine/state.h

/// zero3's mixed-precision gathers ("parallel.mixed_precision"), as FSDP2's
/// MixedPrecisionPolicy: the shards stay fp32 (the master weights the
/// optimizer steps, SAM perturbs and restores); a unit is gathered in
/// `param_dtype`, so the whole parameters, their gradients and the gather's
/// bytes are half of fp32's; gradients are reduce-scattered in
/// `reduce_dtype` and land on the shards in fp32.
///
///     "mixed_precision": {"param_dtype": "bf16",  bf16 (with amp_bf16), or fp16 (amp_fp16 and its scaler)
///                         "reduce_dtype": "fp32", fp32, or param_dtype
///                         "buffers": true}        floating buffers kept in param_dtype too; false keeps
///                                                 them as they are, refused for a buffer whose module's
///                                                 parameters are gathered low (BatchNorm computes with
///                                                 its weight and statistics in one dtype)
struct MixedPrecisionPolicy {
  std::optional<at::ScalarType> param_dtype;  // none: gathered as stored (fp32)
  at::ScalarType reduce_dtype = at::kFloat;
  bool buffers = false;
  bool buffers_given = false;  // the config said so: a model with floating buffers must
  std::string key;             // the section's key path, for messages

  bool active() const { return param_dtype.has_value(); }
};

/// Reads `parallel.mixed_precision` (absent: inactive). The compute dtype is
/// autocast's, so `precision` must be the amp of param_dtype. Throws
/// ConfigError naming the key.
MixedPrecisionPolicy mixed_precision_from_config(Params& parallel, Precision precision);

/// "bf16", "fp16" or "fp32", as the config spells it.
std::string dtype_name(at::ScalarType dtype);

}  // namespace basin
