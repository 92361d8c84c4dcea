#include "basin/core/train/low_precision_speed.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace basin {
namespace {

constexpr int64_t kRows = 64, kInner = 256, kColumns = 256;
constexpr int kMostRuns = 4;
constexpr double kRunsBudgetSeconds = 0.015;

std::string fixed(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

}  // namespace

double time_cpu_product(at::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(dtype);
  const at::Tensor left = at::ones({kRows, kInner}, options), right = at::ones({kInner, kColumns}, options);
  using Clock = std::chrono::steady_clock;
  // The first run pays for warming up (threads, packing buffers): the least of the runs is the product's time.
  double least = std::numeric_limits<double>::infinity(), spent = 0;
  for (int run = 0; run < kMostRuns && (run < 2 || spent < kRunsBudgetSeconds); ++run) {
    const auto start = Clock::now();
    at::Tensor product = at::mm(left, right);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    least = std::min(least, seconds);
    spent += seconds;
  }
  return least;
}

std::string low_precision_speed_warning(Precision precision, const c10::Device& device, const ProductTimer& timer) {
  if (precision == Precision::kFp32 || !device.is_cpu()) return "";
  const bool fp16 = precision == Precision::kAmpFp16;
  const at::ScalarType low = fp16 ? at::kHalf : at::kBFloat16;
  double low_seconds = 0, fp32_seconds = 0;
  try {
    low_seconds = timer(low);
    fp32_seconds = timer(at::kFloat);
  } catch (const c10::Error&) {
    return "";
  }
  if (!(fp32_seconds > 0) || !(low_seconds > kSlowLowPrecisionRatio * fp32_seconds)) return "";
  const std::string format = fp16 ? "fp16" : "bf16";
  const std::string instructions = fp16 ? "AVX512-FP16 or AMX-FP16" : "AVX512-BF16 or AMX";
  return "WARNING: this CPU computes " + format + " matrix products " + fixed(low_seconds / fp32_seconds, 1) +
         "x slower than fp32 (a [" + std::to_string(kRows) + " x " + std::to_string(kInner) + "] x [" +
         std::to_string(kInner) + " x " + std::to_string(kColumns) + "] product: " + fixed(low_seconds * 1e3, 2) +
         " ms against " + fixed(fp32_seconds * 1e3, 2) + " ms): LibTorch has no fast " + format +
         " kernel for it, so precision " + (fp16 ? "amp_fp16" : "amp_bf16") + " (and " + format +
         " gathers under parallel.mixed_precision) will slow training about as much. Fix: precision fp32 here, "
         "or a CPU with " + instructions + ", or a GPU";
}

}  // namespace basin
