#pragma once

#include <cstdint>
#include <vector>

namespace basin {

/// A small seeded generator whose streams are fixed by this code alone (not
/// by the standard library's distributions), so shuffles, subsets and label
/// noise are the same on every platform and LibTorch version.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  /// Derives an independent stream, e.g. Rng(seed, epoch).
  Rng(uint64_t seed, uint64_t stream);

  uint64_t next();
  /// Uniform in [0, n), without modulo bias.
  uint64_t below(uint64_t n);
  /// Uniform in [0, 1).
  double uniform();

 private:
  uint64_t state_;
};

/// A permutation of 0..n-1 (Fisher-Yates).
std::vector<int64_t> permutation(int64_t n, Rng& rng);

}  // namespace basin
