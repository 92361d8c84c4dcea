#include "basin/core/parallel/zero3/mixed_precision.h"

#include "basin/core/config/config.h"
#include "basin/core/engine/state.h"

namespace basin {

namespace {

at::ScalarType dtype_of(const std::string& name) {
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  return at::kFloat;
}

}  // namespace

std::string dtype_name(at::ScalarType dtype) {
  if (dtype == at::kBFloat16) return "bf16";
  if (dtype == at::kHalf) return "fp16";
  return "fp32";
}

MixedPrecisionPolicy mixed_precision_from_config(Params& parallel, Precision precision) {
  MixedPrecisionPolicy policy;
  if (!parallel.has("mixed_precision")) return policy;
  Params section = parallel.object("mixed_precision");
  policy.key = section.path();
  const at::ScalarType param = dtype_of(section.choice("param_dtype", "bf16", {"bf16", "fp16"}));
  const std::string low = dtype_name(param);
  policy.reduce_dtype = dtype_of(section.choice("reduce_dtype", "fp32", {"fp32", low}));
  policy.buffers_given = section.has("buffers");
  policy.buffers = section.boolean("buffers", false);
  section.finish();
  const Precision needed = param == at::kBFloat16 ? Precision::kAmpBf16 : Precision::kAmpFp16;
  if (precision != needed) {
    throw ConfigError("config key '" + policy.key + ".param_dtype': a unit gathered in " + low + " computes under "
                      "autocast's " + low + ", so \"precision\" must be \"amp_" + low + "\" too");
  }
  policy.param_dtype = param;
  return policy;
}

}  // namespace basin
