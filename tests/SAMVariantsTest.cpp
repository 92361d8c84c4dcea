// The SAM family, each variant against its paper's formula written here with
// plain tensor ops and autograd (no basin code): one step and a five-step
// trajectory, around SGD with momentum and around Adam, two param groups;
// the degenerate settings that are SAM. The variants that cut the second
// pass are in SAMCheaperVariantsTest.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/optim/hyperparameters.h"
#include "sam_reference.h"
#include "sam_variants.h"
#include "test_util.h"

namespace basin {
namespace {

using test::Tensors;
using test::moved;
using test::norm_of;

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
  return test::gradient_after(loss, w, d, kRho, eps);
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

/// Gradient centralization: a tensor of 2 dimensions or more less its mean over all but the first.
Tensors centralized(const Tensors& g) {
  Tensors out;
  for (const auto& gi : g) {
    if (gi.dim() < 2) {
      out.push_back(gi);
      continue;
    }
    std::vector<int64_t> dims;
    for (int64_t d = 1; d < gi.dim(); ++d) dims.push_back(d);
    out.push_back(gi - gi.mean(dims, /*keepdim=*/true));
  }
  return out;
}

/// GCSAM: e = rho * gc(g) / (||gc(g)|| + eps).
struct GcsamReference : VariantReference {
  Tensors descent(const test::Problem& batch, const Tensors& w) override {
    const test::LossFn loss = batch.fn();
    return gradient_after(loss, w, centralized(test::gradient_at(loss, w)), 1e-12);
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
         // ASAM's "scale": "weights" leaves the second group's tensor, a "bias", at T = 1.
         test::RunFacts facts;
         facts.model = test::module_naming({b->param_groups()[0].params()[0], b->param_groups()[1].params()[0]},
                                           {"weight", "bias"});
         return test::sam_variant("asam", b, test::sam_keys(o), facts);
       },
       [] { return std::make_unique<AsamReference>(); }},
      {"gsam", [](Base b, SAMOptions o) { return test::sam_variant("gsam", b, test::sam_keys(o, {{"alpha", 0.3}})); },
       [] { return std::make_unique<GsamReference>(0.3); }},
      {"wsam", [](Base b, SAMOptions o) {
         return test::sam_variant("wsam", b, test::sam_keys(o, {{"gamma", 0.9}, {"decouple", false}}));
       },
       [] { return std::make_unique<WsamReference>(0.9, false); }},
      {"wsam_decoupled", [](Base b, SAMOptions o) {
         return test::sam_variant("wsam", b, test::sam_keys(o, {{"gamma", 0.8}, {"decouple", true}}));
       },
       [] { return std::make_unique<WsamReference>(0.8, true); }},
      {"friendly_sam", [](Base b, SAMOptions o) {
         return test::sam_variant("friendly_sam", b, test::sam_keys(o, {{"sigma", 0.8}, {"lambda", 0.6}}));
       },
       [] { return std::make_unique<FriendlyReference>(0.8, 0.6); }},
      {"vasso", [](Base b, SAMOptions o) { return test::sam_variant("vasso", b, test::sam_keys(o, {{"theta", 0.4}})); },
       [] { return std::make_unique<VassoReference>(0.4); }, 1e-7},
      {"fisher_sam",
       [](Base b, SAMOptions o) {
         auto sam = test::sam_variant("fisher_sam", b, test::sam_keys(o));
         for (auto& g : sam->param_groups()) set_hyperparameter(g.options(), "eta", 2.0);
         return sam;
       },
       [] { return std::make_unique<FisherReference>(2.0); }},
      {"gcsam", [](Base b, SAMOptions o) { return test::sam_variant("gcsam", b, test::sam_keys(o)); },
       [] { return std::make_unique<GcsamReference>(); }},
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
  expect_same_as_sam(
      [](Base b, SAMOptions o) { return test::sam_variant("gsam", b, test::sam_keys(o, {{"alpha", 0.0}})); },
      "gsam alpha 0");
  expect_same_as_sam([](Base b, SAMOptions o) {
        return test::sam_variant("friendly_sam", b, test::sam_keys(o, {{"sigma", 0.0}, {"lambda", 0.9}}));
      },
                     "friendly_sam sigma 0");
  expect_same_as_sam(
      [](Base b, SAMOptions o) { return test::sam_variant("vasso", b, test::sam_keys(o, {{"theta", 1.0}})); },
      "vasso theta 1");
  expect_same_as_sam(
      [](Base b, SAMOptions o) {
        auto sam = test::sam_variant("fisher_sam", b, test::sam_keys(o));
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
  expect_same_as_sam(
      [](Base b, SAMOptions o) {
        return test::sam_variant("esam", b, test::sam_keys(o, {{"beta", 1.0}, {"gamma", 1.0}}), test::run_facts(7));
      },
                     "esam beta 1 gamma 1");
}

TEST(SAMVariantsTest, GcsamCentralizesMatricesAndLeavesVectorsAsTheyAre) {
  // A matrix and a bias: y = tanh(x W + b), squared error.
  at::manual_seed(5);
  const at::Tensor x = at::randn({16, 3}), y = at::randn({16, 4});
  Tensors w = test::leaves({at::randn({3, 4}), at::randn({4})});
  const test::LossFn loss = [&x, &y](const Tensors& v) { return (x.matmul(v[0]).add(v[1]).tanh() - y).pow(2).mean(); };
  Tensors expected = test::clone_all(w);
  auto sam = test::sam_variant("gcsam", std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)),
                               {{"rho", kRho}});
  sam->step([&] {
    sam->zero_grad();
    at::Tensor l = loss(w);
    l.backward();
    return l.detach();
  });
  const Tensors g = test::gradient_at(loss, expected);
  const Tensors d = centralized(g);
  EXPECT_TRUE(at::equal(d[1], g[1]));                                    // the bias as it is
  EXPECT_LT(d[0].sum(1).abs().max().item<double>(), 1e-6);               // each row of W now sums to 0
  EXPECT_GT((d[0] - g[0]).abs().max().item<double>(), 1e-4);             // and W's direction changed
  const Tensors descent = gradient_after(loss, expected, d, 1e-12);
  for (std::size_t i = 0; i < 2; ++i) expected[i] = expected[i] - descent[i] * 0.1;
  test::expect_close(w, expected);
  EXPECT_NEAR(sam->last_grad_norm().item<double>(), norm_of(d), 1e-5);  // the norm is the centralized one's
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
  test::RunFacts facts;
  facts.model = test::module_naming(w, {"weight", "bias"});  // as a bias: T = 1
  auto asam = test::sam_variant("asam", std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)),
                                {{"rho", 0.5}}, facts);
  SAMOptimizer& sam = *asam;
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

}  // namespace
}  // namespace basin
