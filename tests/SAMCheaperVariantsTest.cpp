// The SAM family's members that cut SAM's second pass (LookSAM, AE-SAM,
// late-phase SAM, Momentum-SAM, ESAM), each against its paper's rule written
// here with plain tensor ops and autograd (no basin code) over a run that
// exercises each branch, with the closure's passes counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "sam_reference.h"
#include "sam_variants.h"

namespace basin {
namespace {

using test::Tensors;
using test::moved;
using test::norm_of;

constexpr double kRho = 0.07;

/// e = rho * d / (||d|| + eps) for the direction d a variant chooses.
Tensors gradient_after(const test::LossFn& loss, const Tensors& w, const Tensors& d, double eps) {
  return test::gradient_after(loss, w, d, kRho, eps);
}

/// Runs `steps` steps of `sam` (SGD lr 0.1, momentum 0.9 beneath) on rolled
/// batches, each loss scaled by `scales[t]`; returns the closure's calls.
int run_counting(SAMOptimizer& sam, const Tensors& w, int steps, const std::vector<double>& scales = {}) {
  const test::Problem problem;
  int calls = 0;
  for (int t = 0; t < steps; ++t) {
    test::Problem batch = problem;
    batch.x = problem.x.roll(t, 0);
    const double scale = scales.empty() ? 1.0 : scales[static_cast<std::size_t>(t)];
    sam.step([&] {
      ++calls;
      sam.zero_grad();
      at::Tensor loss = batch.loss(w) * scale;
      loss.backward();
      return loss.detach();
    });
  }
  return calls;
}

/// The same run written from the formulas: `rule(t, g, w)` gives step t's
/// update direction from the clean gradient g at w.
Tensors reference_run(const Tensors& w0, int steps, const std::vector<double>& scales,
                      const std::function<Tensors(int, const test::LossFn&, const Tensors&)>& rule) {
  const test::Problem problem;
  Tensors w = test::clone_all(w0);
  test::SgdReference sgd{0.1, 0.9, 0.0, {}};
  for (int t = 0; t < steps; ++t) {
    test::Problem batch = problem;
    batch.x = problem.x.roll(t, 0);
    const double scale = scales.empty() ? 1.0 : scales[static_cast<std::size_t>(t)];
    const test::LossFn loss = [batch, scale](const Tensors& v) { return batch.loss(v) * scale; };
    sgd.step(w, rule(t, loss, w), {0.1, 0.1}, {0.0, 0.0});
  }
  return w;
}

std::shared_ptr<torch::optim::SGD> sgd_for(const Tensors& w) {
  return std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1).momentum(0.9));
}

TEST(SAMVariantsTest, LookSamRefreshesEveryKthStepAndReusesTheOrthogonalPartBetween) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  const Tensors w0 = test::clone_all(w);
  SAMOptions options;
  options.rho = kRho;
  auto looksam = test::sam_variant("looksam", sgd_for(w), test::sam_keys(options, {{"k", 3}, {"alpha", 0.7}}));
  SAMOptimizer& sam = *looksam;
  // 7 steps: refreshes at 0, 3, 6 take two passes, the other 4 one.
  EXPECT_EQ(run_counting(sam, w, 7), 3 * 2 + 4);
  EXPECT_EQ(sam.sam_steps(), 3);
  Tensors orthogonal;
  double orthogonal_norm = 0;
  const Tensors expected = reference_run(w0, 7, {}, [&](int t, const test::LossFn& loss, const Tensors& v) {
    const Tensors g = test::gradient_at(loss, v);
    if (t % 3 == 0) {
      const Tensors gs = gradient_after(loss, v, g, 1e-12);
      double dot = 0, squares = 0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        dot += (gs[i] * g[i]).sum().item<double>();
        squares += g[i].pow(2).sum().item<double>();
      }
      orthogonal.clear();
      for (std::size_t i = 0; i < g.size(); ++i) orthogonal.push_back(gs[i] - g[i] * (dot / squares));
      orthogonal_norm = norm_of(orthogonal);
      return gs;
    }
    Tensors out;
    for (std::size_t i = 0; i < g.size(); ++i) out.push_back(g[i] + orthogonal[i] * (0.7 * norm_of(g) / orthogonal_norm));
    return out;
  });
  test::expect_close(w, expected, 1e-5);
}

TEST(SAMVariantsTest, LookSamRetriesARefreshWhoseDescentOverflowed) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  SAMOptions options;
  options.rho = kRho;
  auto looksam = test::sam_variant("looksam", sgd_for(w), test::sam_keys(options, {{"k", 3}, {"alpha", 0.7}}));
  SAMOptimizer& sam = *looksam;
  int descents = 0;
  PassHooks overflow;  // the second refresh's descent (step 3) overflows, as under a grad scaler
  overflow.gradients_finite = [&descents](Pass pass) { return pass != Pass::kDescent || ++descents != 2; };
  sam.add_pass_hooks(overflow);
  // Steps: 0 refresh (2 passes), 1 and 2 reuse (1 each), 3 refresh skipped (2),
  // 4 the refresh again (2), 5 reuse (1).
  EXPECT_EQ(run_counting(sam, w, 6), 2 + 1 + 1 + 2 + 2 + 1);
  EXPECT_EQ(sam.skipped_steps(), 1);
  EXPECT_EQ(descents, 3);
}

TEST(SAMVariantsTest, AeSamTakesASamStepExactlyWhenTheSquaredNormExceedsItsThreshold) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  const Tensors w0 = test::clone_all(w);
  SAMOptions options;
  options.rho = kRho;
  // Scripted gradient sizes: spikes should be SAM steps, quiet steps plain.
  const std::vector<double> scales = {1, 1, 1, 4, 1, 1, 0.3, 3, 1, 0.5};
  auto ae_sam = test::sam_variant("ae_sam", sgd_for(w),
                                 test::sam_keys(options, {{"delta", 0.9}, {"lambda1", -1}, {"lambda2", 1}}),
                                 test::run_facts(0, 10));
  SAMOptimizer& sam = *ae_sam;
  const int calls = run_counting(sam, w, 10, scales);
  double mean = 0, variance = 0;
  std::vector<bool> decisions;
  const Tensors expected = reference_run(w0, 10, scales, [&](int t, const test::LossFn& loss, const Tensors& v) {
    const Tensors g = test::gradient_at(loss, v);
    const double n = std::pow(norm_of(g), 2);
    mean = 0.9 * mean + 0.1 * n;
    variance = 0.9 * variance + 0.1 * (n - mean) * (n - mean);
    const double c = (t / 10.0) * -1 + (1 - t / 10.0) * 1;
    decisions.push_back(n >= mean + c * std::sqrt(variance));
    return decisions.back() ? gradient_after(loss, v, g, 1e-12) : g;
  });
  const int sam_steps = static_cast<int>(std::count(decisions.begin(), decisions.end(), true));
  ASSERT_GT(sam_steps, 0);
  ASSERT_LT(sam_steps, 10);  // the script exercises both branches
  EXPECT_EQ(sam.sam_steps(), sam_steps);
  EXPECT_EQ(calls, 10 + sam_steps);
  test::expect_close(w, expected, 1e-5);
}

TEST(SAMVariantsTest, LatePhaseSamTakesPlainStepsBeforeItsStart) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  const Tensors w0 = test::clone_all(w);
  SAMOptions options;
  options.rho = kRho;
  options.start = 4;
  SAMOptimizer sam(sgd_for(w), options);
  EXPECT_EQ(run_counting(sam, w, 7), 4 + 3 * 2);
  EXPECT_EQ(sam.sam_steps(), 3);
  const Tensors expected = reference_run(w0, 7, {}, [](int t, const test::LossFn& loss, const Tensors& v) {
    const Tensors g = test::gradient_at(loss, v);
    return t < 4 ? g : gradient_after(loss, v, g, 1e-12);
  });
  test::expect_close(w, expected, 1e-5);
}

/// Momentum-SAM's gradient at w - rho * v / (||v|| + eps), v the momentum
/// before the step; the plain gradient while there is none.
Tensors momentum_sam_gradient(const test::LossFn& loss, const Tensors& w, const Tensors& v, double rho) {
  if (v.empty()) return test::gradient_at(loss, w);
  return test::gradient_at(loss, moved(w, v, -rho / (norm_of(v) + 1e-12)));
}

TEST(SAMVariantsTest, MomentumSamTakesOnePassAheadAlongTheSgdMomentum) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  const Tensors w0 = test::clone_all(w);
  SAMOptions options;
  options.rho = 0.3;
  auto momentum_sam = test::sam_variant("momentum_sam", test::two_group_sgd(w), test::sam_keys(options));
  SAMOptimizer& sam = *momentum_sam;
  EXPECT_EQ(run_counting(sam, w, 6), 6);  // one forward and backward a step
  EXPECT_EQ(sam.sam_steps(), 5);          // the first has no momentum to perturb along
  Tensors expected = test::clone_all(w0);
  test::SgdReference sgd{0.1, 0.9, 0.01, {}};
  for (int t = 0; t < 6; ++t) {
    test::Problem batch = problem;
    batch.x = problem.x.roll(t, 0);
    const Tensors g = momentum_sam_gradient(batch.fn(), expected, sgd.buffers, 0.3);
    sgd.step(expected, g, {0.1, 0.05}, {0.01, 0.0});
  }
  test::expect_close(w, expected, 1e-5);
}

TEST(SAMVariantsTest, MomentumSamReadsAdamsFirstMoment) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  const Tensors w0 = test::clone_all(w);
  SAMOptions options;
  options.rho = 0.3;
  auto momentum_sam = test::sam_variant(
      "momentum_sam", std::make_shared<torch::optim::Adam>(w, torch::optim::AdamOptions(0.01)), test::sam_keys(options));
  SAMOptimizer& sam = *momentum_sam;
  EXPECT_EQ(run_counting(sam, w, 5), 5);
  Tensors expected = test::clone_all(w0);
  test::AdamReference adam;
  for (int t = 0; t < 5; ++t) {
    test::Problem batch = problem;
    batch.x = problem.x.roll(t, 0);
    adam.step(expected, momentum_sam_gradient(batch.fn(), expected, adam.m, 0.3), {0.01, 0.01});
  }
  test::expect_close(w, expected, 1e-5);
}

TEST(SAMVariantsTest, MomentumSamRefusesAnOptimizerWithoutMomentumAndRestoresWOnOverflow) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  EXPECT_THROW(test::sam_variant("momentum_sam", std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), {}),
               ConfigError);
  auto momentum_sam = test::sam_variant("momentum_sam", sgd_for(w), Json::object());
  SAMOptimizer& sam = *momentum_sam;
  run_counting(sam, w, 2);
  const Tensors before = test::clone_all(w);
  PassHooks overflow;
  overflow.gradients_finite = [](Pass) { return false; };
  sam.add_pass_hooks(overflow);
  run_counting(sam, w, 1);
  EXPECT_EQ(sam.skipped_steps(), 1);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_TRUE(at::equal(w[i], before[i])) << "tensor " << i;
}

/// Each sample's loss of the regression: mean over its outputs.
at::Tensor sample_losses(const test::Problem& batch, const Tensors& w) {
  return (batch.x.matmul(w[0]).tanh().matmul(w[1]) - batch.y).pow(2).mean(1);
}

/// A closure that honours SAMOptimizer::request() as the trainer's does,
/// keeping what each call was asked for.
torch::optim::Optimizer::LossClosure request_closure(SAMOptimizer& sam, const test::Problem& batch,
                                                       const Tensors& w, std::vector<PassRequest>& asked) {
  return [&sam, &batch, w, &asked] {
    const PassRequest request = sam.request();
    asked.push_back(request);
    if (request.backward) sam.zero_grad();
    test::Problem picked = batch;
    if (request.samples.defined()) {
      picked.x = batch.x.index_select(0, request.samples);
      picked.y = batch.y.index_select(0, request.samples);
    }
    at::AutoGradMode grad_mode(request.backward);
    const at::Tensor each = sample_losses(picked, w);
    if (request.backward) each.mean().backward();
    return request.per_sample_losses ? each.detach() : each.mean().detach();
  };
}

TEST(SAMVariantsTest, EsamDescendsOnTheSamplesWhoseLossRoseMost) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  Tensors expected = test::clone_all(w);
  SAMOptions options;
  options.rho = kRho;
  auto esam = test::sam_variant("esam", sgd_for(w), test::sam_keys(options, {{"beta", 1.0}, {"gamma", 0.3}}));
  SAMOptimizer& sam = *esam;
  test::SgdReference sgd{0.1, 0.9, 0.0, {}};
  for (int t = 0; t < 4; ++t) {
    test::Problem batch = problem;
    batch.x = problem.x.roll(t, 0);
    std::vector<PassRequest> asked;
    sam.step(request_closure(sam, batch, w, asked));
    // Three passes: the ascent with each sample's loss, a forward alone at w + e, the descent on 5 of 16.
    ASSERT_EQ(asked.size(), 3u);
    EXPECT_TRUE(asked[0].backward && asked[0].per_sample_losses && !asked[0].samples.defined());
    EXPECT_TRUE(!asked[1].backward && asked[1].per_sample_losses && !asked[1].samples.defined());
    EXPECT_TRUE(asked[2].backward && !asked[2].per_sample_losses);
    ASSERT_EQ(asked[2].samples.numel(), 5);  // round(0.3 * 16)

    // The paper's rule, written out.
    const test::LossFn mean_loss = [&batch](const Tensors& v) { return sample_losses(batch, v).mean(); };
    const Tensors g = test::gradient_at(mean_loss, expected);
    const Tensors perturbed = moved(expected, g, kRho / (norm_of(g) + 1e-12));
    const at::Tensor rise = sample_losses(batch, perturbed) - sample_losses(batch, expected);
    std::vector<int64_t> order(16);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&rise](int64_t a, int64_t b) { return rise[a].item<double>() > rise[b].item<double>(); });
    std::vector<int64_t> top(order.begin(), order.begin() + 5);
    std::sort(top.begin(), top.end());
    const at::Tensor chosen = at::tensor(top, at::kLong);
    EXPECT_TRUE(at::equal(asked[2].samples, chosen)) << "step " << t;
    test::Problem subset = batch;
    subset.x = batch.x.index_select(0, chosen);
    subset.y = batch.y.index_select(0, chosen);
    sgd.step(expected, test::gradient_at(subset.fn(), perturbed), {0.1, 0.1}, {0.0, 0.0});
    test::expect_close(w, expected, 1e-5);
  }
}

TEST(SAMVariantsTest, EsamPerturbsTheTensorsItDrawsScaledByOneOverBeta) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  Tensors expected = test::clone_all(w);
  SAMOptions options;
  options.rho = kRho;
  auto esam =
      test::sam_variant("esam", sgd_for(w), test::sam_keys(options, {{"beta", 0.5}, {"gamma", 1.0}}), test::run_facts(3));
  SAMOptimizer& sam = *esam;
  test::SgdReference sgd{0.1, 0.9, 0.0, {}};
  int resting_steps = 0, full_steps = 0, plain_steps = 0;
  for (int t = 0; t < 16; ++t) {
    test::Problem batch = problem;
    batch.x = problem.x.roll(t, 0);
    const auto resting = sam.pass_plan()->ascent(sam.view(), t).resting;
    std::vector<bool> rests;
    for (const auto& v : w) rests.push_back(resting.count(v.unsafeGetTensorImpl()) != 0);
    const bool any = !rests[0] || !rests[1];  // a tensor to perturb; else a plain step
    // In the ascent pass a resting tensor takes no gradient at all.
    int calls = 0;
    sam.step([&] {
      sam.zero_grad();
      if (calls++ == 0) {
        for (std::size_t i = 0; i < w.size(); ++i) {
          EXPECT_EQ(w[i].requires_grad(), !rests[i] || !any) << "step " << t;
        }
      }
      at::Tensor loss = batch.loss(w);
      loss.backward();
      return loss.detach();
    });
    EXPECT_EQ(calls, any ? 2 : 1);  // gamma 1: no forward alone, the descent on every sample
    for (const auto& v : w) EXPECT_TRUE(v.requires_grad());
    Tensors direction = test::gradient_at(batch.fn(), expected);
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (rests[i]) direction[i] = at::zeros_like(direction[i]);
    }
    const Tensors point = any ? moved(expected, direction, kRho / 0.5 / (norm_of(direction) + 1e-12)) : expected;
    sgd.step(expected, test::gradient_at(batch.fn(), point), {0.1, 0.1}, {0.0, 0.0});
    test::expect_close(w, expected, 1e-5);
    resting_steps += rests[0] != rests[1];
    full_steps += !rests[0] && !rests[1];
    plain_steps += !any;
  }
  EXPECT_GT(resting_steps, 0);  // the draws exercised every case
  EXPECT_GT(full_steps, 0);
  EXPECT_GT(plain_steps, 0);
}

TEST(SAMVariantsTest, EsamRestsEachTensorWithProbabilityOneMinusBeta) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  for (const double beta : {0.3, 0.8}) {
    auto sam = test::sam_variant("esam", sgd_for(w), {{"beta", beta}, {"gamma", 1.0}}, test::run_facts(11));
    int resting = 0;
    const int steps = 2000;
    for (int t = 0; t < steps; ++t) resting += static_cast<int>(sam->pass_plan()->ascent(sam->view(), t).resting.size());
    // 4000 draws: 1 - beta within 0.03 (more than 3 standard deviations).
    EXPECT_NEAR(resting / (2.0 * steps), 1 - beta, 0.03) << "beta " << beta;
    // Other seeds draw otherwise.
    auto other = test::sam_variant("esam", sgd_for(w), {{"beta", beta}, {"gamma", 1.0}}, test::run_facts(12));
    int differ = 0;
    for (int t = 0; t < 50; ++t) {
      differ += sam->pass_plan()->ascent(sam->view(), t).resting != other->pass_plan()->ascent(other->view(), t).resting;
    }
    EXPECT_GT(differ, 0);
  }
}

}  // namespace
}  // namespace basin
