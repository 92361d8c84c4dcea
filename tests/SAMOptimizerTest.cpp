#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include "basin/algorithms/sam/sam_family.h"
#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/optim/hyperparameters.h"
#include "sam_reference.h"
#include "test_util.h"

namespace basin {
namespace {

using test::Tensors;

using test::closure_for;
using test::expect_close;
using test::leaves;
using test::Problem;
using test::two_group_sgd;

TEST(SAMOptimizerTest, TwoStepsWithSgdMomentumAndTwoGroupsMatchTheFormula) {
  const Problem problem;
  const Tensors w0 = problem.initial();
  Tensors w = leaves(w0);
  SAMOptimizer sam(two_group_sgd(w), SAMOptions{});
  set_hyperparameter(sam.param_groups()[1].options(), "rho", 0.2);  // per-group rho

  Tensors expected = test::clone_all(w0);
  test::SgdReference sgd{0.1, 0.9, 0.01, {}};
  for (int step = 0; step < 2; ++step) {
    sam.step(closure_for(sam, problem, w));
    sgd.step(expected, test::sam_gradient(problem.fn(), expected, {0.05, 0.2}), {0.1, 0.05}, {0.01, 0.0});
  }
  expect_close(w, expected);
}

TEST(SAMOptimizerTest, TwoStepsWithAdamAndTwoGroupsMatchTheFormula) {
  const Problem problem;
  const Tensors w0 = problem.initial();
  Tensors w = leaves(w0);
  auto adam = std::make_shared<torch::optim::Adam>(
      std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup({w[0]}),
                                                     torch::optim::OptimizerParamGroup({w[1]})},
      torch::optim::AdamOptions(0.01));
  adam->param_groups()[1].options().set_lr(0.03);
  SAMOptimizer sam(adam, SAMOptions{0.1});

  Tensors expected = test::clone_all(w0);
  test::AdamReference reference;
  for (int step = 0; step < 2; ++step) {
    sam.step(closure_for(sam, problem, w));
    reference.step(expected, test::sam_gradient(problem.fn(), expected, {0.1, 0.1}), {0.01, 0.03});
  }
  expect_close(w, expected, 1e-5);
}

TEST(SAMOptimizerTest, TenStepTrajectoryMatchesAnIndependentLoop) {
  const Problem problem;
  const Tensors w0 = problem.initial();
  Tensors w = leaves(w0);
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.05).momentum(0.9)), SAMOptions{0.08});
  Tensors expected = test::clone_all(w0);
  test::SgdReference sgd{0.05, 0.9, 0.0, {}};
  for (int step = 0; step < 10; ++step) {
    // Each step sees another slice of the data, as a loop over batches would.
    Problem batch = problem;
    batch.x = problem.x.roll(step, 0);
    batch.y = problem.y.roll(step, 0);
    sam.step(closure_for(sam, batch, w));
    sgd.step(expected, test::sam_gradient(batch.fn(), expected, {0.08, 0.08}), {0.05, 0.05}, {0.0, 0.0});
  }
  expect_close(w, expected, 1e-5);
}

// SAM around each LibTorch optimizer: the base must step exactly as a twin
// of it does when handed the reference SAM gradient g(w + e).
TEST(SAMOptimizerTest, WrapsEveryLibTorchOptimizer) {
  using Factory = std::function<std::shared_ptr<torch::optim::Optimizer>(const Tensors&)>;
  const std::vector<std::pair<std::string, Factory>> optimizers = {
      {"sgd", [](const Tensors& w) { return std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1).momentum(0.9)); }},
      {"adam", [](const Tensors& w) { return std::make_shared<torch::optim::Adam>(w, torch::optim::AdamOptions(0.01)); }},
      {"adamw", [](const Tensors& w) { return std::make_shared<torch::optim::AdamW>(w, torch::optim::AdamWOptions(0.01)); }},
      {"rmsprop", [](const Tensors& w) { return std::make_shared<torch::optim::RMSprop>(w, torch::optim::RMSpropOptions(0.01)); }},
      {"adagrad", [](const Tensors& w) { return std::make_shared<torch::optim::Adagrad>(w, torch::optim::AdagradOptions(0.1)); }},
  };
  const Problem problem;
  const Tensors w0 = problem.initial();
  for (const auto& [name, make] : optimizers) {
    Tensors w = leaves(w0);
    SAMOptimizer sam(make(w), SAMOptions{0.1});
    Tensors twin_w = leaves(w0);
    auto twin = make(twin_w);
    for (int step = 0; step < 3; ++step) {
      const Tensors g = test::sam_gradient(problem.fn(), test::clone_all(twin_w), {0.1, 0.1});
      for (std::size_t i = 0; i < g.size(); ++i) twin_w[i].mutable_grad() = g[i].clone();
      twin->step();
      sam.step(closure_for(sam, problem, w));
    }
    expect_close(w, twin_w, 1e-5);
    EXPECT_EQ(sam.sam_steps(), 3) << name;
  }
}

TEST(SAMOptimizerTest, AdaptiveStepMatchesTheAsamFormula) {
  const Problem problem;
  const Tensors w0 = problem.initial();
  Tensors w = leaves(w0);
  auto asam = make_sam_optimizer("sam", std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)),
                                 {{"rho", 0.5}, {"adaptive", true}, {"eta", 0.02}});
  SAMOptimizer& sam = *asam;
  sam.step(closure_for(sam, problem, w));
  Tensors expected = test::clone_all(w0);
  const Tensors g = test::asam_gradient(problem.fn(), expected, 0.5, 0.02);
  for (std::size_t i = 0; i < w.size(); ++i) expected[i] = expected[i] - g[i] * 0.1;
  expect_close(w, expected);
}

TEST(SAMOptimizerTest, DescentRunsAtThePerturbedWeights) {
  const Problem problem;
  Tensors w = leaves(problem.initial());
  const Tensors w0 = test::clone_all(w);
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), SAMOptions{0.05});
  std::vector<Pass> passes;
  Tensors seen_in_descent;
  PassHooks hooks;
  hooks.before_pass = [&](Pass pass) {
    passes.push_back(pass);
    if (pass == Pass::kDescent) seen_in_descent = test::clone_all(w);
  };
  sam.add_pass_hooks(hooks);
  sam.step(closure_for(sam, problem, w));
  EXPECT_EQ(passes, (std::vector<Pass>{Pass::kAscent, Pass::kDescent}));
  const Tensors g = test::gradient_at(problem.fn(), w0);
  const double norm = std::sqrt(g[0].pow(2).sum().item<double>() + g[1].pow(2).sum().item<double>());
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_TRUE(at::allclose(seen_in_descent[i], w0[i] + g[i] * (0.05 / norm), 1e-6, 1e-7));
  }
  EXPECT_NEAR(sam.last_grad_norm().item<double>(), norm, 1e-5 * norm);
}

TEST(SAMOptimizerTest, RestoreIsBitExact) {
  const Problem problem;
  Tensors w = leaves(problem.initial());
  const Tensors before = test::clone_all(w);
  // lr 0: the base step changes nothing, so the weights must be exactly w again.
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.0).momentum(0.9)), SAMOptions{0.3});
  for (int i = 0; i < 3; ++i) sam.step(closure_for(sam, problem, w));
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_TRUE(at::equal(w[i], before[i])) << "tensor " << i;
}

TEST(SAMOptimizerTest, BackupBuffersAreAllocatedOnce) {
  const Problem problem;
  Tensors w = leaves(problem.initial());
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), SAMOptions{});
  sam.step(closure_for(sam, problem, w));
  std::vector<const void*> addresses;
  for (const auto& b : sam.perturbed_buffers()) addresses.push_back(b.data_ptr());
  ASSERT_EQ(addresses.size(), 2u);
  for (int i = 0; i < 3; ++i) sam.step(closure_for(sam, problem, w));
  for (std::size_t i = 0; i < addresses.size(); ++i) EXPECT_EQ(sam.perturbed_buffers()[i].data_ptr(), addresses[i]);
}

TEST(SAMOptimizerTest, TheAscentsGradientsAreLetGoBeforeTheDescentsBackward) {
  // A zero_grad that sets gradients to none (LibTorch 2.x's) frees the
  // ascent's: nothing of the step may keep them through the descent's
  // backward, which would hold two gradients of the model at its peak.
  const Problem problem;
  Tensors w = leaves(problem.initial());
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), SAMOptions{0.05});
  for (int step = 0; step < 2; ++step) {
    std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> ascent;
    int calls = 0;
    sam.step([&] {
      for (auto& p : w) p.mutable_grad().reset();  // set to none by hand: LibTorch 1.13's zero_grad zeroes
      if (++calls == 2) {
        for (std::size_t i = 0; i < ascent.size(); ++i) EXPECT_TRUE(ascent[i].expired()) << "step " << step << ", tensor " << i;
      }
      at::Tensor loss = problem.loss(w);
      loss.backward();
      if (calls == 1) {
        for (const auto& p : w) ascent.push_back(p.grad().storage().getWeakStorageImpl());
      }
      return loss.detach();
    });
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(ascent.size(), w.size());
  }
}

TEST(SAMOptimizerTest, ZeroGradientNormGivesNoPerturbationAndNoNaN) {
  Tensors w = leaves({at::randn({3})});
  const Tensors before = test::clone_all(w);
  SAMOptions options;
  options.epsilon = 0;  // even without epsilon: no 0/0
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), options);
  Tensors seen_in_descent;
  PassHooks hooks;
  hooks.before_pass = [&](Pass pass) {
    if (pass == Pass::kDescent) seen_in_descent = test::clone_all(w);
  };
  sam.add_pass_hooks(hooks);
  sam.step([&] {
    sam.zero_grad();
    at::Tensor loss = (w[0] * 0).sum();
    loss.backward();
    return loss.detach();
  });
  EXPECT_EQ(sam.last_grad_norm().item<double>(), 0.0);
  EXPECT_TRUE(at::equal(seen_in_descent[0], before[0]));
  EXPECT_TRUE(at::equal(w[0], before[0]));
  EXPECT_FALSE(w[0].isnan().any().item<bool>());
}

TEST(SAMOptimizerTest, FrozenAndUnusedParametersAreUntouched) {
  const Problem problem;
  Tensors w = leaves(problem.initial());
  const at::Tensor frozen = at::randn({3});               // requires_grad false
  const at::Tensor unused = at::randn({5}).requires_grad_(true);  // never gets a grad
  const at::Tensor frozen_before = frozen.clone(), unused_before = unused.detach().clone();
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(Tensors{w[0], w[1], frozen, unused}, torch::optim::SGDOptions(0.1)),
                   SAMOptions{0.5});
  bool frozen_stayed = true;
  PassHooks hooks;
  hooks.before_pass = [&](Pass pass) {
    if (pass == Pass::kDescent) frozen_stayed = at::equal(frozen, frozen_before) && at::equal(unused.detach(), unused_before);
  };
  sam.add_pass_hooks(hooks);
  for (int i = 0; i < 2; ++i) sam.step(closure_for(sam, problem, w));
  EXPECT_TRUE(frozen_stayed);
  EXPECT_TRUE(at::equal(frozen, frozen_before));
  EXPECT_TRUE(at::equal(unused.detach(), unused_before));
  EXPECT_EQ(sam.perturbed_buffers().size(), 2u);  // only the parameters with gradients get a buffer
}

TEST(SAMOptimizerTest, IntervalRunsTwoPassesOnEveryKthStep) {
  const Problem problem;
  Tensors w = leaves(problem.initial());
  SAMOptions options;
  options.interval = 3;
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.01)), options);
  int calls = 0;
  for (int i = 0; i < 7; ++i) sam.step(closure_for(sam, problem, w, &calls));
  EXPECT_EQ(calls, 7 + 3);  // steps 0, 3 and 6 are SAM steps
  EXPECT_EQ(sam.steps(), 7);
  EXPECT_EQ(sam.sam_steps(), 3);
}

TEST(SAMOptimizerTest, StepWithoutClosureIsThePlainBaseStep) {
  Tensors w = leaves({at::ones({2})});
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.5)), SAMOptions{});
  w[0].mutable_grad() = at::full({2}, 2.0);
  EXPECT_NO_THROW(sam.step());
  EXPECT_TRUE(at::equal(w[0].detach(), at::zeros({2})));  // 1 - 0.5 * 2
}

TEST(SAMOptimizerTest, SkippedPassRestoresWeightsAndSkipsTheBaseStep) {
  const Problem problem;
  for (Pass failing : {Pass::kAscent, Pass::kDescent}) {
    Tensors w = leaves(problem.initial());
    const Tensors before = test::clone_all(w);
    SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), SAMOptions{0.2});
    PassHooks hooks;
    hooks.gradients_finite = [failing](Pass pass) { return pass != failing; };
    sam.add_pass_hooks(hooks);
    sam.step(closure_for(sam, problem, w));
    for (std::size_t i = 0; i < w.size(); ++i) {
      EXPECT_TRUE(at::equal(w[i], before[i])) << pass_name(failing);
      // Zeroed, or set to None as LibTorch 2.x's zero_grad does.
      EXPECT_TRUE(!w[i].grad().defined() || w[i].grad().abs().sum().item<double>() == 0.0) << pass_name(failing);
    }
    EXPECT_EQ(sam.skipped_steps(), 1);
  }
}

TEST(SAMOptimizerTest, SaveAndLoadBringBackWrapperAndBaseState) {
  const Problem problem;
  const Tensors w0 = problem.initial();
  Tensors a = leaves(w0);
  SAMOptimizer original(std::make_shared<torch::optim::SGD>(a, torch::optim::SGDOptions(0.1).momentum(0.9)), SAMOptions{});
  for (int i = 0; i < 3; ++i) original.step(closure_for(original, problem, a));
  original.param_groups()[0].options().set_lr(0.07);
  set_hyperparameter(original.param_groups()[0].options(), "rho", 0.11);
  test::TempDir dir;
  torch::save(original, dir.file("sam.pt"));

  Tensors b = leaves(test::clone_all(a));
  SAMOptimizer resumed(std::make_shared<torch::optim::SGD>(b, torch::optim::SGDOptions(0.5).momentum(0.9)), SAMOptions{});
  torch::load(resumed, dir.file("sam.pt"));
  EXPECT_EQ(resumed.steps(), 3);
  EXPECT_DOUBLE_EQ(resumed.param_groups()[0].options().get_lr(), 0.07);
  EXPECT_DOUBLE_EQ(resumed.base().param_groups()[0].options().get_lr(), 0.07);
  EXPECT_DOUBLE_EQ(get_hyperparameter(resumed.param_groups()[0].options(), "rho"), 0.11);

  // The next step, momentum buffers included, is the same as the original's.
  original.step(closure_for(original, problem, a));
  resumed.step(closure_for(resumed, problem, b));
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i]));
}

TEST(SAMOptimizerTest, TiedParameterIsPerturbedNormedAndRestoredOnce) {
  const Problem problem;
  Tensors w = leaves(problem.initial());
  const Tensors w0 = test::clone_all(w);
  // w[0] listed twice, as tied weights are by named_parameters().
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(Tensors{w[0], w[1], w[0]}, torch::optim::SGDOptions(0.0)),
                   SAMOptions{0.05});
  Tensors seen_in_descent;
  PassHooks hooks;
  hooks.before_pass = [&](Pass pass) {
    if (pass == Pass::kDescent) seen_in_descent = test::clone_all(w);
  };
  sam.add_pass_hooks(hooks);
  sam.step(closure_for(sam, problem, w));
  const Tensors g = test::gradient_at(problem.fn(), w0);
  const double norm = std::sqrt(g[0].pow(2).sum().item<double>() + g[1].pow(2).sum().item<double>());
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_TRUE(at::allclose(seen_in_descent[i], w0[i] + g[i] * (0.05 / norm), 1e-6, 1e-7)) << i;
    EXPECT_TRUE(at::equal(w[i], w0[i])) << i;  // lr 0: restored exactly
  }
  EXPECT_EQ(sam.perturbed_buffers().size(), 2u);
}

TEST(SAMOptimizerTest, FailingDescentLeavesTheModelAtW) {
  const Problem problem;
  Tensors w = leaves(problem.initial());
  const Tensors before = test::clone_all(w);
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), SAMOptions{0.5});
  std::vector<std::string> journal;
  PassHooks hooks;
  hooks.before_pass = [&](Pass pass) { journal.push_back(std::string("before ") + pass_name(pass)); };
  hooks.after_pass = [&](Pass pass) { journal.push_back(std::string("after ") + pass_name(pass)); };
  sam.add_pass_hooks(hooks);
  int calls = 0;
  auto failing = [&] {
    if (++calls == 2) throw std::runtime_error("descent failed");
    return closure_for(sam, problem, w)();
  };
  EXPECT_THROW(sam.step(failing), std::runtime_error);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_TRUE(at::equal(w[i], before[i])) << i;
  EXPECT_EQ(journal, (std::vector<std::string>{"before ascent", "after ascent", "before descent", "after descent"}));
  EXPECT_EQ(sam.pass(), Pass::kPlain);
  // The next step works as usual.
  sam.step(closure_for(sam, problem, w));
  EXPECT_FALSE(at::equal(w[0], before[0]));
}

TEST(SAMOptimizerTest, BuffersFollowAParameterThatChangedDtype) {
  const Problem problem;
  Tensors w = leaves(problem.initial());
  SAMOptimizer sam(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), SAMOptions{});
  sam.step(closure_for(sam, problem, w));
  // What Module::to(kDouble) does: same parameter objects, new dtype.
  for (auto& p : w) p.set_data(p.to(at::kDouble));
  Problem doubled = problem;
  doubled.x = problem.x.to(at::kDouble);
  doubled.y = problem.y.to(at::kDouble);
  sam.step(closure_for(sam, doubled, w));
  for (const auto& b : sam.perturbed_buffers()) EXPECT_EQ(b.scalar_type(), at::kDouble);
  for (const auto& p : w) EXPECT_EQ(p.scalar_type(), at::kDouble);
}

TEST(SAMOptimizerTest, SaveTakesValuesSetOnTheBaseSinceTheLastStep) {
  Tensors w = leaves({at::ones({2})});
  auto sgd = std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1));
  SAMOptimizer sam(sgd, SAMOptions{});
  sgd->param_groups()[0].options().set_lr(0.02);  // e.g. LibTorch's StepLR bound to the base
  test::TempDir dir;
  torch::save(sam, dir.file("sam.pt"));
  Tensors v = leaves({at::ones({2})});
  SAMOptimizer resumed(std::make_shared<torch::optim::SGD>(v, torch::optim::SGDOptions(0.5)), SAMOptions{});
  torch::load(resumed, dir.file("sam.pt"));
  EXPECT_DOUBLE_EQ(resumed.base().param_groups()[0].options().get_lr(), 0.02);
  EXPECT_DOUBLE_EQ(resumed.param_groups()[0].options().get_lr(), 0.02);
}

TEST(SAMOptimizerTest, ARuleNotOwnedByASharedPtrIsRefusedRatherThanLeftDangling) {
  Tensors w = leaves({at::ones({2})});
  Params params(Json::object(), "algorithms.sam");
  SAM on_the_stack(params);  // the step it made would outlive it
  State state;
  EXPECT_THROW(on_the_stack.make_optimizer(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), state),
               std::logic_error);
  Params shared_params(Json::object(), "algorithms.sam");
  auto shared = std::make_shared<SAM>(shared_params);
  auto step = shared->make_optimizer(std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)), state);
  EXPECT_EQ(&step->rule(), static_cast<SAMRule*>(shared.get()));
  EXPECT_THROW(shared->make_optimizer(step, state), std::logic_error);  // one step per rule
}

TEST(SAMOptimizerTest, RejectsBadOptionsAndDoubleWrapping) {
  Tensors w = leaves({at::ones({2})});
  auto sgd = std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1));
  SAMOptions bad;
  bad.interval = 0;
  EXPECT_THROW(SAMOptimizer(sgd, bad), std::invalid_argument);
  auto sam = std::make_shared<SAMOptimizer>(sgd, SAMOptions{});
  EXPECT_THROW(SAMOptimizer(sam, SAMOptions{}), std::invalid_argument);
}

}  // namespace
}  // namespace basin
