#include "basin/core/base/random.h"

#include <numeric>
#include <utility>

namespace basin {

Rng::Rng(uint64_t seed, uint64_t stream) : state_(seed) {
  // Mix the stream id in through two outputs so nearby ids give unrelated streams.
  state_ ^= Rng(stream * 0x9E3779B97F4A7C15ULL + 1).next();
  next();
}

uint64_t Rng::next() {  // SplitMix64
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t Rng::below(uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do { x = next(); } while (x >= limit);
  return x % n;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::vector<int64_t> permutation(int64_t n, Rng& rng) {
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(order[i], order[rng.below(static_cast<uint64_t>(i) + 1)]);
  }
  return order;
}

}  // namespace basin
