#include "basin/core/state.h"

namespace basin {

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::kPlain: return "plain";
    case Pass::kAscent: return "ascent";
    case Pass::kDescent: return "descent";
  }
  return "unknown";
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kAmpBf16: return "amp_bf16";
    case Precision::kAmpFp16: return "amp_fp16";
  }
  return "unknown";
}

}  // namespace basin
