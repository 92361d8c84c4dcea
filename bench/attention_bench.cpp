// Attention over a window against full causal attention (models/attention.h),
// as a training step runs it: forward and backward of one layer's heads,
// q, k and v [1, 8, T, 64] in fp32, one intra-op thread.
//   - Attention/<T>/<window>: window 0 is full causal attention (the plain
//     causal kernel); a window below T runs the path for a narrower mask
//     that this build has (see models/attention.h). The goal, on
//     the PyPI 2.11 build: a window of 512 on 2048 tokens at no more than
//     full attention's time.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "basin/models/attention.h"

namespace {

void Attention(benchmark::State& state) {
  at::set_num_threads(1);
  const int64_t t = state.range(0);
  basin::layers::AttentionMask mask;
  mask.window = state.range(1);
  at::manual_seed(0);
  auto input = [&] { return at::randn({1, 8, t, 64}).requires_grad_(true); };
  const at::Tensor q = input(), k = input(), v = input();
  for (auto _ : state) {
    const at::Tensor y = basin::layers::attention(q, k, v, mask, {});
    y.sum().backward();
    q.mutable_grad() = at::Tensor(), k.mutable_grad() = at::Tensor(), v.mutable_grad() = at::Tensor();
  }
  state.SetItemsProcessed(state.iterations() * t);  // tokens
}
BENCHMARK(Attention)->Args({2048, 0})->Args({2048, 512})->Args({2048, 128})->Args({512, 0})->Args({512, 128})
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
