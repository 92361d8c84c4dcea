#include "basin/core/base/seeded_noise.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "basin/core/base/random.h"

namespace basin {

uint64_t noise_seed(uint64_t run_seed, int64_t step, int64_t parameter) {
  return Rng(Rng(run_seed, static_cast<uint64_t>(step)).next(), static_cast<uint64_t>(parameter)).next();
}

namespace {

/// Block `block` of the Philox-4x32-10 stream `row` under key `seed`: the
/// four numbers ATen's philox_engine(seed, row) gives at its calls 4 block
/// to 4 block + 3, computed without its per-call bookkeeping.
inline void philox_block(uint64_t seed, uint64_t row, uint64_t block, uint32_t out[4]) {
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32);
  uint32_t c2 = static_cast<uint32_t>(row), c3 = static_cast<uint32_t>(row >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

}  // namespace

at::Tensor seeded_normal_rows(uint64_t seed, int64_t first_row, int64_t rows, int64_t row_numel) {
  // Philox (counter-based): the 64-bit seed is its key and the row its
  // subsequence, so a row costs no generator state and no two rows share
  // a stream (a 32-bit seed per row would repeat rows among a model's).
  // Each block of four numbers gives two (u, v) pairs, and Box-Muller turns
  // each pair into two normals.
  const int64_t pairs = (row_numel + 1) / 2;
  at::Tensor first = at::empty({rows, pairs}, at::kFloat), second = at::empty({rows, pairs}, at::kFloat);
  float* u = first.data_ptr<float>();
  float* v = second.data_ptr<float>();
  constexpr float kTwoToMinus32 = 2.3283064365386963e-10f;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    uint32_t block[4];
    for (int64_t r = begin; r < end; ++r) {
      const uint64_t row = static_cast<uint64_t>(first_row + r);
      float* ur = u + r * pairs;
      float* vr = v + r * pairs;
      for (int64_t i = 0; i < pairs; i += 2) {
        philox_block(seed, row, static_cast<uint64_t>(i / 2), block);
        ur[i] = (static_cast<float>(block[0]) + 0.5f) * kTwoToMinus32;  // in (0, 1]: its log is finite
        vr[i] = static_cast<float>(block[1]) * kTwoToMinus32;
        if (i + 1 < pairs) {
          ur[i + 1] = (static_cast<float>(block[2]) + 0.5f) * kTwoToMinus32;
          vr[i + 1] = static_cast<float>(block[3]) * kTwoToMinus32;
        }
      }
    }
  });
  const at::Tensor radius = first.log_().mul_(-2.0).sqrt_();
  const at::Tensor angle = second.mul_(2.0 * std::acos(-1.0));
  const at::Tensor cosines = at::cos(angle);
  angle.sin_();
  // Each row: its pairs' cosine normals, then their sine normals, written in place.
  at::Tensor normals = at::empty({rows, 2 * pairs}, at::kFloat);
  at::Tensor cosine_part = normals.narrow(1, 0, pairs), sine_part = normals.narrow(1, pairs, pairs);
  at::mul_out(cosine_part, radius, cosines);
  at::mul_out(sine_part, radius, angle);
  return row_numel == 2 * pairs ? normals : normals.narrow(1, 0, row_numel).contiguous();
}

}  // namespace basin
