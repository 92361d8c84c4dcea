#pragma once

#include <algorithm>
#include <cstdint>

namespace basin {

/// Linear ramp from `start` to 1 over `length` units; 1 afterwards. A start
/// of 0 is allowed: the first unit then runs with the value 0.
inline double linear_ramp(int64_t t, int64_t length, double start) {
  if (length <= 0 || t >= length) return 1.0;
  return start + (1.0 - start) * static_cast<double>(t) / static_cast<double>(length);
}

}  // namespace basin
