#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "basin/callbacks/grad_scaler.h"
#include "basin/core/base/torch_compat.h"
#include "basin/core/communication/communicator.h"

namespace basin {
namespace {

GradScalerOptions options(double init_scale, int64_t growth_interval) {
  GradScalerOptions o;
  o.init_scale = init_scale;
  o.growth_interval = growth_interval;
  return o;
}

TEST(GradScalerTest, ScaleBacksOffOnOverflowAndGrowsAfterCleanSteps) {
  GradScaler scaler(options(128, 1));
  const std::vector<bool> overflow = {false, true, false, false, true, true, false};
  double expected = 128;
  for (bool inf : overflow) {
    at::Tensor g = at::ones({3});
    if (inf) g[1] = INFINITY;
    scaler.unscale_and_check({g}, nullptr);
    scaler.update();
    expected = inf ? expected * 0.5 : expected * 2;
    EXPECT_EQ(scaler.current_scale(), expected);
  }
  // growth_interval 3: growth only after three clean steps in a row.
  GradScaler slow(options(8, 3));
  std::vector<double> scales;
  for (int i = 0; i < 7; ++i) {
    slow.update();
    scales.push_back(slow.current_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{8, 8, 16, 16, 16, 32, 32}));
}

TEST(GradScalerTest, NeverGrowsToInfinity) {
  GradScaler scaler(options(std::ldexp(1.0, 127), 1));
  scaler.update();
  EXPECT_EQ(scaler.current_scale(), std::ldexp(1.0, 127));  // 2^128 is inf in float
}

TEST(GradScalerTest, UnscalesExactlyAndDetectsInfAndNaN) {
  GradScaler scaler(options(1024, 10));
  const at::Tensor g = at::randn({5});
  at::Tensor scaled = scaler.scale(g);
  EXPECT_TRUE(scaler.unscale_and_check({scaled}, nullptr));
  EXPECT_TRUE(at::equal(scaled, g));  // a power of two scales and unscales exactly
  EXPECT_FALSE(scaler.step_found_inf());
  at::Tensor nan = at::ones({2});
  nan[0] = NAN;
  EXPECT_FALSE(scaler.unscale_and_check({at::ones({2}), nan}, nullptr));
  EXPECT_TRUE(scaler.unscale_and_check({at::ones({2})}, nullptr));  // a later clean pass...
  EXPECT_TRUE(scaler.step_found_inf());                             // ...does not clear the step's verdict
  scaler.update();
  EXPECT_FALSE(scaler.step_found_inf());
  EXPECT_EQ(scaler.current_scale(), 512);
}

TEST(GradScalerTest, DisabledScalerChangesNothing) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  const at::Tensor loss = at::tensor(2.5f);
  EXPECT_TRUE(at::equal(scaler.scale(loss), loss));
  at::Tensor inf = at::full({1}, INFINITY);
  EXPECT_TRUE(scaler.unscale_and_check({inf}, nullptr));
  scaler.update();
  EXPECT_EQ(scaler.current_scale(), o.init_scale);
}

TEST(GradScalerTest, StateDictRoundTrip) {
  GradScaler original(options(256, 4));
  original.update();
  original.update();  // tracker 2
  at::Tensor inf = at::full({1}, INFINITY);
  original.unscale_and_check({inf}, nullptr);
  original.update();  // backoff: 128, tracker 0
  original.update();  // tracker 1
  GradScaler restored(options(65536, 2000));
  restored.load_state_dict(original.state_dict());
  EXPECT_EQ(restored.current_scale(), 128);
  EXPECT_EQ(restored.growth_tracker(), 1);
  EXPECT_EQ(restored.options().growth_interval, 4);
  for (int i = 0; i < 3; ++i) {
    original.update();
    restored.update();
  }
  EXPECT_EQ(restored.current_scale(), original.current_scale());
  EXPECT_EQ(restored.current_scale(), 256);
}

// Ranks as threads over a HashStore: one rank overflows, every rank must skip.
TEST(GradScalerTest, OverflowOnOneRankIsEveryRanksOverflow) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<int> verdicts(2, -1);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      auto communicator = make_gloo_communicator(store, rank, 2, std::chrono::seconds(20));
      GradScaler scaler(options(64, 1));
      at::Tensor g = at::ones({4});
      if (rank == 1) g[2] = INFINITY;
      const bool first = scaler.unscale_and_check({g}, communicator.get());
      const bool second = scaler.unscale_and_check({at::ones({4})}, communicator.get());  // both clean
      verdicts[rank] = (first ? 1 : 0) + (second ? 2 : 0);
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(verdicts, (std::vector<int>{2, 2}));
}

// ATen's fused kernels and the portable ops must be one arithmetic: the same
// unscaled gradients, the same verdicts and the same scale, bit for bit,
// through clean steps, growth, inf and NaN, in every gradient dtype.
void expect_fused_equals_portable(const at::Device& device) {
  GradScalerOptions fused_options = options(1024, 2), portable_options = options(1024, 2);
  portable_options.fused = false;
  GradScaler fused(fused_options), portable(portable_options);
  at::manual_seed(3);
  for (int step = 0; step < 8; ++step) {
    std::vector<at::Tensor> grads = {(at::randn({1000}) * 1000).to(device),
                                     (at::randn({64}) * 1000).to(device, at::kBFloat16),
                                     (at::randn({64}) * 100).to(device, at::kHalf)};
    if (step == 2) grads[0][7] = INFINITY;
    if (step == 4) grads[1][9] = NAN;
    if (step == 6) grads[2][0] = -INFINITY;
    std::vector<at::Tensor> a, b;
    for (const auto& g : grads) {
      a.push_back(g.clone());
      b.push_back(g.clone());
    }
    const bool fused_finite = fused.unscale_and_check(a, nullptr);
    const bool portable_finite = portable.unscale_and_check(b, nullptr);
    EXPECT_EQ(fused_finite, portable_finite) << "step " << step;
    EXPECT_EQ(fused_finite, step != 2 && step != 4 && step != 6) << "step " << step;
    for (std::size_t i = 0; i < a.size(); ++i) {
      // NaN == NaN here: equal_nan, and exact (no tolerance).
      EXPECT_TRUE(at::allclose(a[i].cpu().to(at::kDouble), b[i].cpu().to(at::kDouble), 0, 0, /*equal_nan=*/true))
          << "step " << step << " tensor " << i;
    }
    fused.update();
    portable.update();
    EXPECT_EQ(fused.current_scale(), portable.current_scale()) << "step " << step;
    EXPECT_EQ(fused.growth_tracker(), portable.growth_tracker()) << "step " << step;
  }
  // 1024, grown once (steps 0 and 1 clean) and halved three times over the 8 steps.
  EXPECT_EQ(fused.current_scale(), 1024.0 * 2 * 0.5 * 0.5 * 0.5) << "the steps exercised growth and backoff";
}

TEST(GradScalerTest, FusedKernelsAgreeWithThePortablePathOnCpu) {
  if (!compat::kFusedAmpKernelsOnCpu) {
    GTEST_SKIP() << "LibTorch " << compat::torch_version() << " has no CPU kernels for the fused loss-scaling ops "
                 << "(2.3 and later have): only the portable path runs on CPU";
  }
  expect_fused_equals_portable(at::kCPU);
}

TEST(GradScalerTest, FusedKernelsAgreeWithThePortablePathOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: the CUDA comparison runs on a GPU machine";
  expect_fused_equals_portable(at::Device(at::kCUDA, 0));
}

}  // namespace
}  // namespace basin
