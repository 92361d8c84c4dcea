// One source of truth for hyper-parameters, in the spirit of Composer's
// TestSAMParamGroups: whatever a scheduler or the user sets, on the SAM
// wrapper or on the base, is what the base step uses.

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/optim/schedulers/step_lr.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/optim/hyperparameters.h"
#include "basin/core/optim/scheduler.h"

namespace basin {
namespace {

// loss = sum(w * c): the gradient is c wherever w is, so with plain SGD the
// step is exactly -lr * c and the lr the base used can be read off the weights.
struct LinearFixture {
  at::Tensor w = at::zeros({4}).requires_grad_(true);
  at::Tensor c = at::tensor({1.0f, 2.0f, -1.0f, 0.5f});
  std::shared_ptr<torch::optim::SGD> base = std::make_shared<torch::optim::SGD>(std::vector<at::Tensor>{w}, torch::optim::SGDOptions(0.1));
  std::shared_ptr<SAMOptimizer> sam = std::make_shared<SAMOptimizer>(base, SAMOptions{});

  // Runs one SAM step and returns the lr the base step applied.
  double step_and_measure_lr() {
    const at::Tensor before = w.detach().clone();
    sam->step([this] {
      sam->zero_grad();
      at::Tensor loss = (w * c).sum();
      loss.backward();
      return loss.detach();
    });
    return ((before - w.detach()) / c).mean().item<double>();
  }
};

std::shared_ptr<Scheduler> scheduler(const std::string& text) {
  Params params(Json::parse(text), "schedulers[0]");
  return make_scheduler(params);
}

TEST(SAMParamGroupsTest, WrapperMirrorsBaseGroupsAndAddsRho) {
  LinearFixture f;
  ASSERT_EQ(f.sam->param_groups().size(), 1u);
  EXPECT_TRUE(f.sam->param_groups()[0].params()[0].is_same(f.w));
  EXPECT_DOUBLE_EQ(f.sam->param_groups()[0].options().get_lr(), 0.1);
  EXPECT_DOUBLE_EQ(get_hyperparameter(f.sam->param_groups()[0].options(), "rho"), 0.05);
}

TEST(SAMParamGroupsTest, WarmupFromZeroOnTheWrapperReachesTheBase) {
  // The case that silently trained nothing in Composer: the wrapper's lr
  // warmed up while the base kept lr 0.
  LinearFixture f;
  auto warmup = scheduler(R"({"name": "linear_warmup", "warmup": 4})");
  warmup->attach(*f.sam, 100);
  std::vector<double> used;
  for (int i = 0; i < 6; ++i) {
    used.push_back(f.step_and_measure_lr());
    warmup->step(*f.sam);
  }
  const std::vector<double> expected = {0.0, 0.025, 0.05, 0.075, 0.1, 0.1};
  for (std::size_t i = 0; i < used.size(); ++i) EXPECT_NEAR(used[i], expected[i], 1e-7) << "step " << i;
  EXPECT_DOUBLE_EQ(f.base->param_groups()[0].options().get_lr(), 0.1);
}

TEST(SAMParamGroupsTest, SchedulerOnTheBaseReachesTheWrapper) {
  LinearFixture f;
  auto decay = scheduler(R"({"name": "exponential", "gamma": 0.5})");
  decay->attach(*f.base, 100);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(f.step_and_measure_lr(), 0.1 * std::pow(0.5, i), 1e-7);
    decay->step(*f.base);
  }
  f.sam->sync_param_groups();
  EXPECT_DOUBLE_EQ(f.sam->param_groups()[0].options().get_lr(), 0.0125);
}

// The lrs LibTorch's StepLR gives a plain optimizer, step by step: the reference.
std::vector<double> step_lr_reference(int64_t step_size, double gamma, int steps) {
  at::Tensor p = at::zeros({1}, at::requires_grad());
  torch::optim::SGD plain({p}, torch::optim::SGDOptions(0.1));
  torch::optim::StepLR step_lr(plain, step_size, gamma);
  std::vector<double> lrs;
  for (int i = 0; i < steps; ++i) {
    lrs.push_back(plain.param_groups()[0].options().get_lr());
    step_lr.step();
  }
  return lrs;
}

TEST(SAMParamGroupsTest, LibTorchStepLROnTheWrapper) {
  LinearFixture f;
  torch::optim::StepLR step_lr(*f.sam, /*step_size=*/2, /*gamma=*/0.1);
  const auto expected = step_lr_reference(2, 0.1, 6);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(f.step_and_measure_lr(), expected[i], 1e-4 * expected[i]) << "step " << i;
    step_lr.step();
  }
  EXPECT_LT(expected.back(), 0.1);  // the schedule did decay within the test
}

TEST(SAMParamGroupsTest, LibTorchStepLROnTheBase) {
  LinearFixture f;
  torch::optim::StepLR step_lr(*f.base, 1, 0.5);
  const auto expected = step_lr_reference(1, 0.5, 4);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(f.step_and_measure_lr(), expected[i], 1e-4 * expected[i]) << "step " << i;
    step_lr.step();
  }
  EXPECT_LT(expected.back(), 0.1);
}

TEST(SAMParamGroupsTest, UserSetsOnEitherSide) {
  LinearFixture f;
  f.base->param_groups()[0].options().set_lr(0.3);
  EXPECT_NEAR(f.step_and_measure_lr(), 0.3, 1e-7);
  EXPECT_DOUBLE_EQ(f.sam->param_groups()[0].options().get_lr(), 0.3);
  f.sam->param_groups()[0].options().set_lr(0.2);
  EXPECT_NEAR(f.step_and_measure_lr(), 0.2, 1e-7);
  // Both changed since the last step: the wrapper's value wins.
  f.base->param_groups()[0].options().set_lr(0.9);
  f.sam->param_groups()[0].options().set_lr(0.4);
  EXPECT_NEAR(f.step_and_measure_lr(), 0.4, 1e-7);
  EXPECT_DOUBLE_EQ(f.base->param_groups()[0].options().get_lr(), 0.4);
}

TEST(SAMParamGroupsTest, EveryNumericHyperparameterIsShared) {
  LinearFixture f;
  set_hyperparameter(f.sam->param_groups()[0].options(), "weight_decay", 0.25);
  set_hyperparameter(f.sam->param_groups()[0].options(), "momentum", 0.5);
  f.sam->sync_param_groups();
  const auto& base_options = static_cast<const torch::optim::SGDOptions&>(f.base->param_groups()[0].options());
  EXPECT_DOUBLE_EQ(base_options.weight_decay(), 0.25);
  EXPECT_DOUBLE_EQ(base_options.momentum(), 0.5);
}

TEST(SAMParamGroupsTest, RhoIsAScheduledGroupHyperparameter) {
  LinearFixture f;
  auto rho = scheduler(R"({"name": "linear_warmup", "warmup": 2, "hyperparameter": "rho"})");
  rho->attach(*f.sam, 10);
  EXPECT_DOUBLE_EQ(get_hyperparameter(f.sam->param_groups()[0].options(), "rho"), 0.0);
  rho->step(*f.sam);
  EXPECT_DOUBLE_EQ(get_hyperparameter(f.sam->param_groups()[0].options(), "rho"), 0.025);
  EXPECT_THROW(scheduler(R"({"name": "constant", "hyperparameter": "rho"})")->attach(*f.base, 10), std::invalid_argument);
}

TEST(SAMParamGroupsTest, GroupAddedToTheBaseIsPickedUp) {
  LinearFixture f;
  at::Tensor extra = at::zeros({2}).requires_grad_(true);
  f.base->add_param_group(torch::optim::OptimizerParamGroup({extra}, std::make_unique<torch::optim::SGDOptions>(0.5)));
  f.sam->step([&] {
    f.sam->zero_grad();
    at::Tensor loss = (f.w * f.c).sum() + extra.sum() * 2;
    loss.backward();
    return loss.detach();
  });
  ASSERT_EQ(f.sam->param_groups().size(), 2u);
  EXPECT_DOUBLE_EQ(f.sam->param_groups()[1].options().get_lr(), 0.5);
  EXPECT_DOUBLE_EQ(get_hyperparameter(f.sam->param_groups()[1].options(), "rho"), 0.05);
  EXPECT_TRUE(at::allclose(extra.detach(), at::full({2}, -1.0)));  // -0.5 * 2
  EXPECT_EQ(f.sam->perturbed_buffers().size(), 2u);
}

TEST(SAMParamGroupsTest, GroupAddedToTheWrapperReachesTheBase) {
  LinearFixture f;
  at::Tensor extra = at::zeros({2}).requires_grad_(true);
  f.sam->add_param_group(torch::optim::OptimizerParamGroup({extra}, std::make_unique<HyperparameterMap>(
                                                                        std::map<std::string, double>{{"lr", 0.25}})));
  f.sam->sync_param_groups();
  ASSERT_EQ(f.base->param_groups().size(), 2u);
  EXPECT_DOUBLE_EQ(f.base->param_groups()[1].options().get_lr(), 0.25);
  EXPECT_DOUBLE_EQ(get_hyperparameter(f.sam->param_groups()[1].options(), "momentum"), 0.0);  // filled from base defaults

  at::Tensor other = at::zeros({1}).requires_grad_(true);
  f.sam->add_param_group(torch::optim::OptimizerParamGroup({other}, std::make_unique<torch::optim::SGDOptions>(0.1)));
  try {
    f.sam->sync_param_groups();
    FAIL() << "expected an error for a foreign options type";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("HyperparameterMap"), std::string::npos);
  }
  // The rejected group is gone again: later steps are not poisoned by it.
  EXPECT_EQ(f.sam->param_groups().size(), 2u);
  EXPECT_NO_THROW(f.step_and_measure_lr());
}

}  // namespace
}  // namespace basin
