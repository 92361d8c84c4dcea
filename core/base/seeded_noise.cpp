#include "basin/core/base/seeded_noise.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/PhiloxRNGEngine.h>

#include "basin/core/base/random.h"

namespace basin {

uint64_t noise_seed(uint64_t run_seed, int64_t step, int64_t parameter) {
  return Rng(Rng(run_seed, static_cast<uint64_t>(step)).next(), static_cast<uint64_t>(parameter)).next();
}

at::Tensor seeded_normal_rows(uint64_t seed, int64_t first_row, int64_t rows, int64_t row_numel) {
  // Philox (counter-based): the 64-bit seed is its key and the row its
  // subsequence, so a row costs no generator state and no two rows share
  // a stream (a 32-bit seed per row would repeat rows among a model's).
  // Box-Muller turns each pair of uniforms into two normals.
  const int64_t pairs = (row_numel + 1) / 2;
  at::Tensor first = at::empty({rows, pairs}, at::kFloat), second = at::empty({rows, pairs}, at::kFloat);
  float* u = first.data_ptr<float>();
  float* v = second.data_ptr<float>();
  constexpr float kTwoToMinus32 = 2.3283064365386963e-10f;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      at::philox_engine engine(seed, static_cast<uint64_t>(first_row + r));
      for (int64_t i = r * pairs; i < (r + 1) * pairs; ++i) {
        u[i] = (static_cast<float>(engine()) + 0.5f) * kTwoToMinus32;  // in (0, 1]: its log is finite
        v[i] = static_cast<float>(engine()) * kTwoToMinus32;
      }
    }
  });
  const at::Tensor radius = first.log_().mul_(-2.0).sqrt_();
  const at::Tensor angle = second.mul_(2.0 * std::acos(-1.0));
  return at::cat({radius * at::cos(angle), radius * at::sin(angle)}, 1).narrow(1, 0, row_numel).contiguous();
}

}  // namespace basin
