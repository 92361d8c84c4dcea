// The SAM family, each variant against its paper's formula written here with
// plain tensor ops and autograd (no basin code): one step and a five-step
// trajectory, around SGD with momentum and around Adam, two param groups;
// the degenerate settings that are SAM; and each variant training for real.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <filesystem>
#include <memory>

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/ae_sam.h"
#include "basin/algorithms/esam.h"
#include "basin/algorithms/fisher_sam.h"
#include "basin/algorithms/friendly_sam.h"
#include "basin/algorithms/gsam.h"
#include "basin/algorithms/looksam.h"
#include "basin/algorithms/momentum_sam.h"
#include "basin/algorithms/sam_optimizer.h"
#include "basin/algorithms/vasso.h"
#include "basin/algorithms/wsam.h"
#include "basin/core/hyperparameters.h"
#include "sam_reference.h"
#include "test_util.h"

namespace basin {
namespace {

using test::Tensors;

double norm_of(const Tensors& ts) {
  double squares = 0;
  for (const auto& t : ts) squares += t.pow(2).sum().item<double>();
  return std::sqrt(squares);
}

Tensors moved(const Tensors& w, const Tensors& direction, double scale) {
  Tensors out;
  for (std::size_t i = 0; i < w.size(); ++i) out.push_back(w[i] + direction[i] * scale);
  return out;
}

/// A variant's descent gradient at w, from its paper, keeping its own state.
class VariantReference {
 public:
  virtual ~VariantReference() = default;
  virtual Tensors descent(const test::Problem& batch, const Tensors& w) = 0;
  /// After the base step (WSAM's decoupled sharpness step).
  virtual void after_base_step(Tensors& /*w*/, const std::vector<double>& /*lrs*/) {}
};

constexpr double kRho = 0.07;

/// e = rho * d / (||d|| + eps) for the direction d a variant chooses.
Tensors gradient_after(const test::LossFn& loss, const Tensors& w, const Tensors& d, double eps) {
  return test::gradient_at(loss, moved(w, d, kRho / (norm_of(d) + eps)));
}

/// ASAM with T = |w| + eta on the first tensor and T = 1 on the second (a bias).
struct AsamReference : VariantReference {
  Tensors descent(const test::Problem& batch, const Tensors& w) override {
    const test::LossFn loss = batch.fn();
    const Tensors g = test::gradient_at(loss, w);
    const at::Tensor t0 = w[0].abs() + 0.01;
    const double norm = norm_of({t0 * g[0], g[1]});
    return test::gradient_at(loss, {w[0] + t0.pow(2) * g[0] * (kRho / (norm + 1e-12)), w[1] + g[1] * (kRho / (norm + 1e-12))});
  }
};

struct GsamReference : VariantReference {
  double alpha;
  explicit GsamReference(double a) : alpha(a) {}
  Tensors descent(const test::Problem& batch, const Tensors& w) override {
    const test::LossFn loss = batch.fn();
    const Tensors g = test::gradient_at(loss, w);
    Tensors gp = gradient_after(loss, w, g, 1e-12);
    double dot = 0;
    for (std::size_t i = 0; i < g.size(); ++i) dot += (g[i] * gp[i]).sum().item<double>();
    const double ng = norm_of(g), np = norm_of(gp);
    const double cosine = dot / (np * ng + 1e-12);
    for (std::size_t i = 0; i < g.size(); ++i) {
      const at::Tensor orthogonal = g[i] - gp[i] * (cosine * ng / (np + 1e-12));
      gp[i] = gp[i] - orthogonal * alpha;
    }
    return gp;
  }
};

struct WsamReference : VariantReference {
  double weight;  // gamma / (1 - gamma)
  bool decouple;
  Tensors sharpness;
  WsamReference(double gamma, bool d) : weight(gamma / (1 - gamma)), decouple(d) {}
  Tensors descent(const test::Problem& batch, const Tensors& w) override {
    const test::LossFn loss = batch.fn();
    const Tensors g = test::gradient_at(loss, w);
    const Tensors gp = gradient_after(loss, w, g, 1e-12);
    Tensors out;
    sharpness.clear();
    for (std::size_t i = 0; i < g.size(); ++i) {
      sharpness.push_back(gp[i] - g[i]);
      out.push_back(decouple ? g[i] : g[i] + (gp[i] - g[i]) * weight);
    }
    return out;
  }
  void after_base_step(Tensors& w, const std::vector<double>& lrs) override {
    if (!decouple) return;
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = w[i] - sharpness[i] * (lrs[i] * weight);
  }
};

struct FriendlyReference : VariantReference {
  double sigma, lambda;
  Tensors average;
  FriendlyReference(double s, double l) : sigma(s), lambda(l) {}
  Tensors descent(const test::Problem& batch, const Tensors& w) override {
    const test::LossFn loss = batch.fn();
    const Tensors g = test::gradient_at(loss, w);
    Tensors d = g;
    if (average.empty()) {
      average = test::clone_all(g);
    } else {
      for (std::size_t i = 0; i < g.size(); ++i) {
        d[i] = g[i] - average[i] * sigma;              // the average of the steps before
        average[i] = average[i] * lambda + g[i] * (1 - lambda);  // of raw gradients
      }
    }
    return gradient_after(loss, w, d, 1e-12);
  }
};

struct VassoReference : VariantReference {
  double theta;
  Tensors average;
  explicit VassoReference(double t) : theta(t) {}
  Tensors descent(const test::Problem& batch, const Tensors& w) override {
    const test::LossFn loss = batch.fn();
    const Tensors g = test::gradient_at(loss, w);
    if (average.empty()) {
      average = test::clone_all(g);
    } else {
      for (std::size_t i = 0; i < g.size(); ++i) average[i] = average[i] * (1 - theta) + g[i] * theta;
    }
    return gradient_after(loss, w, average, 1e-7);
  }
};

struct FisherReference : VariantReference {
  double eta;
  explicit FisherReference(double e) : eta(e) {}
  Tensors descent(const test::Problem& batch, const Tensors& w) override {
    const test::LossFn loss = batch.fn();
    const Tensors g = test::gradient_at(loss, w);
    Tensors d;
    double quadratic = 0;  // g^T f^-1 g
    for (const auto& gi : g) {
      const at::Tensor fisher = gi.pow(2) * eta + 1;
      d.push_back(gi / fisher);
      quadratic += (gi.pow(2) / fisher).sum().item<double>();
    }
    return test::gradient_at(loss, moved(w, d, kRho / (std::sqrt(quadratic) + 1e-12)));
  }
};

/// mSAM over the rows of the problem: part i of m climbs from its own gradient.
struct MsamReference : VariantReference {
  int64_t m;
  explicit MsamReference(int64_t parts) : m(parts) {}
  Tensors descent(const test::Problem& batch, const Tensors& w) override {
    const auto xs = batch.x.chunk(m), ys = batch.y.chunk(m);
    Tensors sum;
    for (int64_t i = 0; i < m; ++i) {
      test::LossFn part = [&, i](const Tensors& v) {
        return (xs[i].matmul(v[0]).tanh().matmul(v[1]) - ys[i]).pow(2).mean() / static_cast<double>(m);
      };
      const Tensors gi = gradient_after(part, w, test::gradient_at(part, w), 1e-12);
      if (sum.empty()) sum = gi;
      else for (std::size_t j = 0; j < gi.size(); ++j) sum[j] = sum[j] + gi[j];
    }
    return sum;
  }
};

/// The closure mSAM's parts need: the rows of part `part()` of `parts()`.
torch::optim::Optimizer::LossClosure parts_closure(SAMOptimizer& sam, const test::Problem& problem, const Tensors& w) {
  return [&sam, &problem, w] {
    sam.zero_grad();
    const int64_t parts = sam.parts();
    const at::Tensor x = problem.x.chunk(parts)[sam.part()], y = problem.y.chunk(parts)[sam.part()];
    at::Tensor loss = (x.matmul(w[0]).tanh().matmul(w[1]) - y).pow(2).mean();  // the part's own mean
    loss.backward();
    return loss.detach();
  };
}

struct VariantCase {
  std::string name;
  std::function<std::shared_ptr<SAMOptimizer>(std::shared_ptr<torch::optim::Optimizer>, SAMOptions)> make;
  std::function<std::unique_ptr<VariantReference>()> reference;
  double epsilon = 1e-12;
  int64_t parts = 1;
};

void PrintTo(const VariantCase& c, std::ostream* os) { *os << c.name; }

std::vector<VariantCase> variant_cases() {
  using Base = std::shared_ptr<torch::optim::Optimizer>;
  return {
      {"asam",
       [](Base b, SAMOptions o) {
         o.adaptive = true;
         auto sam = std::make_shared<SAMOptimizer>(b, o);
         sam->set_unscaled({sam->param_groups()[1].params()[0].unsafeGetTensorImpl()});
         return sam;
       },
       [] { return std::make_unique<AsamReference>(); }},
      {"gsam", [](Base b, SAMOptions o) { return std::make_shared<GSAMOptimizer>(b, o, 0.3); },
       [] { return std::make_unique<GsamReference>(0.3); }},
      {"wsam", [](Base b, SAMOptions o) { return std::make_shared<WSAMOptimizer>(b, o, 0.9, false); },
       [] { return std::make_unique<WsamReference>(0.9, false); }},
      {"wsam_decoupled", [](Base b, SAMOptions o) { return std::make_shared<WSAMOptimizer>(b, o, 0.8, true); },
       [] { return std::make_unique<WsamReference>(0.8, true); }},
      {"friendly_sam", [](Base b, SAMOptions o) { return std::make_shared<FriendlySAMOptimizer>(b, o, 0.8, 0.6); },
       [] { return std::make_unique<FriendlyReference>(0.8, 0.6); }},
      {"vasso", [](Base b, SAMOptions o) { return std::make_shared<VaSSOOptimizer>(b, o, 0.4); },
       [] { return std::make_unique<VassoReference>(0.4); }, 1e-7},
      {"fisher_sam",
       [](Base b, SAMOptions o) {
         auto sam = std::make_shared<FisherSAMOptimizer>(b, o);
         for (auto& g : sam->param_groups()) set_hyperparameter(g.options(), "eta", 2.0);
         return sam;
       },
       [] { return std::make_unique<FisherReference>(2.0); }},
      {"msam", [](Base b, SAMOptions o) { return std::make_shared<SAMOptimizer>(b, o); },
       [] { return std::make_unique<MsamReference>(4); }, 1e-12, 4},
  };
}

class VariantFormulaTest : public ::testing::TestWithParam<VariantCase> {
 protected:
  /// Five steps on rolled batches, checked after the first and the last;
  /// `base_step` is the base optimizer's reference.
  void run(std::shared_ptr<torch::optim::Optimizer> base, Tensors& w, const std::vector<double>& lrs,
           const std::function<void(Tensors&, const Tensors&)>& base_step) {
    const VariantCase& c = GetParam();
    SAMOptions options;
    options.rho = kRho;
    options.epsilon = c.epsilon;
    options.parts = c.parts;
    auto sam = c.make(std::move(base), options);
    auto reference = c.reference();
    Tensors expected = test::clone_all(w);
    const test::Problem problem;
    for (int step = 0; step < 5; ++step) {
      test::Problem batch = problem;
      batch.x = problem.x.roll(step, 0);
      batch.y = problem.y.roll(step, 0);
      sam->step(c.parts > 1 ? parts_closure(*sam, batch, w) : test::closure_for(*sam, batch, w));
      base_step(expected, reference->descent(batch, expected));
      reference->after_base_step(expected, lrs);
      if (step == 0) test::expect_close(w, expected, 1e-5);
    }
    test::expect_close(w, expected, 1e-5);
  }
};

TEST_P(VariantFormulaTest, FiveStepsAroundSgdMomentumWithTwoGroupsMatchThePaper) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  auto sgd = test::two_group_sgd(w);
  test::SgdReference reference{0.1, 0.9, 0.01, {}};
  run(sgd, w, {0.1, 0.05},
      [&reference](Tensors& v, const Tensors& g) { reference.step(v, g, {0.1, 0.05}, {0.01, 0.0}); });
}

TEST_P(VariantFormulaTest, FiveStepsAroundAdamWithTwoGroupsMatchThePaper) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  auto adam = std::make_shared<torch::optim::Adam>(
      std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup({w[0]}),
                                                     torch::optim::OptimizerParamGroup({w[1]})},
      torch::optim::AdamOptions(0.01));
  adam->param_groups()[1].options().set_lr(0.03);
  test::AdamReference reference;
  run(adam, w, {0.01, 0.03}, [&reference](Tensors& v, const Tensors& g) { reference.step(v, g, {0.01, 0.03}); });
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantFormulaTest, ::testing::ValuesIn(variant_cases()),
                         [](const auto& info) { return info.param.name; });

/// Five steps of `make`'s optimizer and of plain SAM: the weights, bit for bit.
void expect_same_as_sam(const std::function<std::shared_ptr<SAMOptimizer>(std::shared_ptr<torch::optim::Optimizer>,
                                                                            SAMOptions)>& make,
                        const std::string& what, double epsilon = 1e-12) {
  const test::Problem problem;
  Tensors variant_w = test::leaves(problem.initial()), sam_w = test::leaves(test::clone_all(variant_w));
  SAMOptions options;
  options.rho = kRho;
  options.epsilon = epsilon;
  auto variant = make(std::make_shared<torch::optim::SGD>(variant_w, torch::optim::SGDOptions(0.1).momentum(0.9)), options);
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(sam_w, torch::optim::SGDOptions(0.1).momentum(0.9)), options);
  for (int step = 0; step < 5; ++step) {
    test::Problem batch = problem;
    batch.x = problem.x.roll(step, 0);
    variant->step(test::closure_for(*variant, batch, variant_w));
    sam.step(test::closure_for(sam, batch, sam_w));
  }
  for (std::size_t i = 0; i < sam_w.size(); ++i) EXPECT_TRUE(at::equal(variant_w[i], sam_w[i])) << what << " tensor " << i;
}

TEST(SAMVariantsTest, DegenerateSettingsAreSamBitForBit) {
  using Base = std::shared_ptr<torch::optim::Optimizer>;
  expect_same_as_sam([](Base b, SAMOptions o) { return std::make_shared<GSAMOptimizer>(b, o, 0.0); }, "gsam alpha 0");
  expect_same_as_sam([](Base b, SAMOptions o) { return std::make_shared<FriendlySAMOptimizer>(b, o, 0.0, 0.9); },
                     "friendly_sam sigma 0");
  expect_same_as_sam([](Base b, SAMOptions o) { return std::make_shared<VaSSOOptimizer>(b, o, 1.0); }, "vasso theta 1");
  expect_same_as_sam(
      [](Base b, SAMOptions o) {
        auto sam = std::make_shared<FisherSAMOptimizer>(b, o);
        for (auto& g : sam->param_groups()) set_hyperparameter(g.options(), "eta", 0.0);
        return sam;
      },
      "fisher_sam eta 0");
  expect_same_as_sam(
      [](Base b, SAMOptions o) {
        o.parts = 1;
        return std::make_shared<SAMOptimizer>(b, o);
      },
      "msam m 1");
  expect_same_as_sam([](Base b, SAMOptions o) { return std::make_shared<ESAMOptimizer>(b, o, 1.0, 1.0, 7); },
                     "esam beta 1 gamma 1");
}

TEST(SAMVariantsTest, UnperturbedParametersStayAtWAndLeaveTheNorm) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  SAMOptions options;
  options.rho = kRho;
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), options);
  sam.set_unperturbed({w[1].unsafeGetTensorImpl()});
  Tensors expected = test::clone_all(w);
  sam.step(test::closure_for(sam, problem, w));
  // Reference: e only on w[0], normed over g[0] alone.
  const Tensors g = test::gradient_at(problem.fn(), expected);
  const Tensors perturbed = {expected[0] + g[0] * (kRho / (norm_of({g[0]}) + 1e-12)), expected[1]};
  const Tensors descent = test::gradient_at(problem.fn(), perturbed);
  for (std::size_t i = 0; i < 2; ++i) expected[i] = expected[i] - descent[i] * 0.1;
  test::expect_close(w, expected);
  EXPECT_EQ(sam.perturbed_buffers().size(), 1u);  // the one extra copy covers w[0] alone
}

TEST(SAMVariantsTest, AsamScalesOnlyTheParametersItIsAskedTo) {
  const test::Problem problem;
  Tensors w = test::leaves(problem.initial());
  SAMOptions options;
  options.rho = 0.5;
  options.adaptive = true;
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), options);
  sam.set_unscaled({w[1].unsafeGetTensorImpl()});  // as a bias: T = 1
  Tensors expected = test::clone_all(w);
  sam.step(test::closure_for(sam, problem, w));
  const Tensors g = test::gradient_at(problem.fn(), expected);
  const at::Tensor t0 = expected[0].abs() + 0.01;
  const double norm = norm_of({t0 * g[0], g[1]});
  const Tensors perturbed = {expected[0] + t0.pow(2) * g[0] * (0.5 / (norm + 1e-12)),
                             expected[1] + g[1] * (0.5 / (norm + 1e-12))};
  const Tensors descent = test::gradient_at(problem.fn(), perturbed);
  for (std::size_t i = 0; i < 2; ++i) expected[i] = expected[i] - descent[i] * 0.1;
  test::expect_close(w, expected);
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
  LookSAMOptimizer sam(sgd_for(w), options, /*k=*/3, /*alpha=*/0.7);
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
  LookSAMOptimizer sam(sgd_for(w), options, /*k=*/3, /*alpha=*/0.7);
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
  AESAMOptimizer sam(sgd_for(w), options, /*delta=*/0.9, /*lambda1=*/-1, /*lambda2=*/1, /*run_steps=*/10);
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
  MomentumSAMOptimizer sam(test::two_group_sgd(w), options);
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
  MomentumSAMOptimizer sam(std::make_shared<torch::optim::Adam>(w, torch::optim::AdamOptions(0.01)), options);
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
  EXPECT_THROW(MomentumSAMOptimizer(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), {}),
               std::invalid_argument);
  MomentumSAMOptimizer sam(sgd_for(w), {});
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
  ESAMOptimizer sam(sgd_for(w), options, /*beta=*/1.0, /*gamma=*/0.3, /*seed=*/0);
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
  ESAMOptimizer sam(sgd_for(w), options, /*beta=*/0.5, /*gamma=*/1.0, /*seed=*/3);
  test::SgdReference sgd{0.1, 0.9, 0.0, {}};
  int resting_steps = 0, full_steps = 0, plain_steps = 0;
  for (int t = 0; t < 16; ++t) {
    test::Problem batch = problem;
    batch.x = problem.x.roll(t, 0);
    const auto resting = sam.resting_tensors(t);
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
    ESAMOptimizer sam(sgd_for(w), {}, beta, 1.0, /*seed=*/11);
    int resting = 0;
    const int steps = 2000;
    for (int t = 0; t < steps; ++t) resting += static_cast<int>(sam.resting_tensors(t).size());
    // 4000 draws: 1 - beta within 0.03 (more than 3 standard deviations).
    EXPECT_NEAR(resting / (2.0 * steps), 1 - beta, 0.03) << "beta " << beta;
    // Other seeds draw otherwise.
    ESAMOptimizer other(sgd_for(w), {}, beta, 1.0, /*seed=*/12);
    int differ = 0;
    for (int t = 0; t < 50; ++t) differ += sam.resting_tensors(t) != other.resting_tensors(t);
    EXPECT_GT(differ, 0);
  }
}

}  // namespace
}  // namespace basin
