#include "basin/core/base/seeded_noise.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "basin/core/base/random.h"

namespace basin {

uint64_t noise_seed(uint64_t run_seed, int64_t step, int64_t parameter) {
  return Rng(Rng(run_seed, static_cast<uint64_t>(step)).next(), static_cast<uint64_t>(parameter)).next();
}

at::Tensor seeded_normal_rows(uint64_t seed, int64_t first_row, int64_t rows, int64_t row_numel) {
  at::Tensor values = at::empty({rows, row_numel}, at::kFloat);
  at::Generator generator = at::detail::createCPUGenerator();  // this call's alone: normal_ takes its lock
  for (int64_t r = 0; r < rows; ++r) {
    generator.set_current_seed(Rng(seed, static_cast<uint64_t>(first_row + r)).next());
    values[r].normal_(0.0, 1.0, generator);
  }
  return values;
}

}  // namespace basin
