// The fused Adam and AdamW (core/optim/fused_adam.h) against LibTorch's own,
// step by step, from the same weights and gradients: the same updates to
// float rounding, the same state in LibTorch's types, and LibTorch's step
// itself where a parameter cannot be fused.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include "basin/core/config/config.h"
#include "basin/core/optim/fused_adam.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/optim/optimizers.h"

namespace basin {
namespace {

using Tensors = std::vector<at::Tensor>;
using MakeOptimizer = std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

// Two groups of parameters.
std::vector<torch::optim::OptimizerParamGroup> groups_of(const Tensors& first, const Tensors& second) {
  return {torch::optim::OptimizerParamGroup(first), torch::optim::OptimizerParamGroup(second)};
}

// The same three parameters every time (one of a length no vector register divides), of `dtype`.
Tensors fresh(at::ScalarType dtype) {
  at::manual_seed(5);
  return {at::randn({37, 29}, dtype).requires_grad_(), at::randn({29}, dtype).requires_grad_(),
          at::randn({3, 5}, dtype).requires_grad_()};
}

// Runs `steps` steps of both optimizers from the same weights and gradients; returns the two sets of weights.
std::pair<Tensors, Tensors> run_both(const MakeOptimizer& make_ours, const MakeOptimizer& make_theirs, int steps,
                                     at::ScalarType dtype = at::kFloat) {
  Tensors ours = fresh(dtype), theirs = fresh(dtype);
  auto ours_optimizer = make_ours(groups_of({ours[0], ours[1]}, {ours[2]}));
  auto theirs_optimizer = make_theirs(groups_of({theirs[0], theirs[1]}, {theirs[2]}));
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < ours.size(); ++i) {
      const at::Tensor grad = at::randn_like(ours[i]) * (s + 1);
      ours[i].mutable_grad() = grad.clone();
      theirs[i].mutable_grad() = grad.clone();
    }
    ours_optimizer->step();
    theirs_optimizer->step();
  }
  return {ours, theirs};
}

void expect_close(const Tensors& ours, const Tensors& theirs, const std::string& what) {
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const double worst = (ours[i] - theirs[i]).abs().max().item<double>();
    EXPECT_LE(worst, 2e-6) << what << ": parameter " << i;  // float rounding over a few steps of lr 0.01-0.05
    EXPECT_FALSE(ours[i].equal(fresh(ours[i].scalar_type())[i])) << what << ": parameter " << i << " never moved";
  }
}

torch::optim::AdamOptions adam_options(bool amsgrad) {
  return torch::optim::AdamOptions(0.05).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1).amsgrad(amsgrad);
}

torch::optim::AdamWOptions adamw_options(bool amsgrad) {
  return torch::optim::AdamWOptions(0.05).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1).amsgrad(amsgrad);
}

TEST(FusedAdamTest, StepsAsLibTorchsAdamAndAdamWToFloatRounding) {
  for (const bool amsgrad : {false, true}) {
    const std::string which = amsgrad ? " with AMSGrad" : "";
    auto [ours, theirs] = run_both(
        [&](auto groups) {
          groups[1].set_options(std::make_unique<torch::optim::AdamOptions>(adam_options(amsgrad).lr(0.01).weight_decay(0)));
          return std::make_shared<FusedAdam>(std::move(groups), adam_options(amsgrad));
        },
        [&](auto groups) {
          groups[1].set_options(std::make_unique<torch::optim::AdamOptions>(adam_options(amsgrad).lr(0.01).weight_decay(0)));
          return std::make_shared<torch::optim::Adam>(std::move(groups), adam_options(amsgrad));
        },
        6);
    expect_close(ours, theirs, "adam" + which);
    auto [ours_w, theirs_w] = run_both(
        [&](auto groups) { return std::make_shared<FusedAdamW>(std::move(groups), adamw_options(amsgrad)); },
        [&](auto groups) { return std::make_shared<torch::optim::AdamW>(std::move(groups), adamw_options(amsgrad)); }, 6);
    expect_close(ours_w, theirs_w, "adamw" + which);
  }
}

TEST(FusedAdamTest, KeepsLibTorchsStateForCheckpoints) {
  Tensors ours = fresh(at::kFloat), theirs = fresh(at::kFloat);
  FusedAdam fused(groups_of({ours[0], ours[1]}, {ours[2]}), adam_options(/*amsgrad=*/true));
  torch::optim::Adam adam(groups_of({theirs[0], theirs[1]}, {theirs[2]}), adam_options(/*amsgrad=*/true));
  for (int s = 0; s < 2; ++s) {
    for (std::size_t i = 0; i < ours.size(); ++i) {
      // A parameter without a gradient is not stepped, nor given state.
      ours[i].mutable_grad() = i == 1 ? at::Tensor() : at::full_like(ours[i], 0.5 + s);
      theirs[i].mutable_grad() = ours[i].grad().defined() ? ours[i].grad().clone() : at::Tensor();
    }
    fused.step();
    adam.step();
  }
  ASSERT_EQ(fused.state().size(), 2u);
  EXPECT_EQ(fused.state().count(optimizer_state_key(ours[1])), 0u);
  for (const std::size_t i : {0, 2}) {
    const auto& mine = static_cast<const torch::optim::AdamParamState&>(*fused.state().at(optimizer_state_key(ours[i])));
    const auto& libtorch = static_cast<const torch::optim::AdamParamState&>(*adam.state().at(optimizer_state_key(theirs[i])));
    EXPECT_EQ(mine.step(), 2);
    EXPECT_TRUE(at::allclose(mine.exp_avg(), libtorch.exp_avg(), 1e-6, 1e-7)) << "parameter " << i;
    EXPECT_TRUE(at::allclose(mine.exp_avg_sq(), libtorch.exp_avg_sq(), 1e-6, 1e-7)) << "parameter " << i;
    EXPECT_TRUE(at::allclose(mine.max_exp_avg_sq(), libtorch.max_exp_avg_sq(), 1e-6, 1e-7)) << "parameter " << i;
  }
}

TEST(FusedAdamTest, AParameterThatCannotBeFusedTakesLibTorchsStep) {
  auto [ours, theirs] = run_both(
      [](auto groups) { return std::make_shared<FusedAdam>(std::move(groups), adam_options(false)); },
      [](auto groups) { return std::make_shared<torch::optim::Adam>(std::move(groups), adam_options(false)); }, 3,
      at::kDouble);
  for (std::size_t i = 0; i < ours.size(); ++i) EXPECT_TRUE(ours[i].equal(theirs[i])) << "parameter " << i;
}

TEST(FusedAdamTest, OneParameterThatCannotBeFusedSendsTheWholeStepToLibTorch) {
  // A double parameter among float ones: LibTorch's step for all, bit for bit, never a step half fused.
  const auto with_a_double = [] {
    Tensors t = fresh(at::kFloat);
    t[2] = t[2].detach().to(at::kDouble).requires_grad_();
    return groups_of({t[0], t[1]}, {t[2]});
  };
  auto ours_optimizer = std::make_shared<FusedAdam>(with_a_double(), adam_options(false));
  auto theirs_optimizer = std::make_shared<torch::optim::Adam>(with_a_double(), adam_options(false));
  const std::vector<torch::optim::Optimizer*> both{ours_optimizer.get(), theirs_optimizer.get()};
  for (int s = 0; s < 3; ++s) {
    for (auto* optimizer : both) {
      at::manual_seed(s);
      for (auto& p : optimizer->param_groups()[0].params()) p.mutable_grad() = at::randn_like(p);
      for (auto& p : optimizer->param_groups()[1].params()) p.mutable_grad() = at::randn_like(p);
      optimizer->step();
    }
  }
  for (std::size_t g = 0; g < 2; ++g) {
    const auto& mine = ours_optimizer->param_groups()[g].params();
    const auto& libtorch = theirs_optimizer->param_groups()[g].params();
    for (std::size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(mine[i].equal(libtorch[i])) << "group " << g << ", parameter " << i;
    }
  }
}

TEST(FusedAdamTest, AStateWithOtherStridesIsSteppedByLibTorchNotHalfFused) {
  // As a state loaded from a file may come: exp_avg transposed in memory. LibTorch's step handles any strides.
  Tensors ours = fresh(at::kFloat), theirs = fresh(at::kFloat);
  FusedAdam fused(groups_of({ours[0], ours[1]}, {ours[2]}), adam_options(false));
  torch::optim::Adam adam(groups_of({theirs[0], theirs[1]}, {theirs[2]}), adam_options(false));
  for (int s = 0; s < 3; ++s) {
    for (std::size_t i = 0; i < ours.size(); ++i) {
      ours[i].mutable_grad() = at::randn_like(ours[i]);
      theirs[i].mutable_grad() = ours[i].grad().clone();
    }
    if (s == 1) {
      for (torch::optim::Optimizer* optimizer : std::vector<torch::optim::Optimizer*>{&fused, &adam}) {
        auto& state = static_cast<torch::optim::AdamParamState&>(
            *optimizer->state().at(optimizer_state_key(optimizer->param_groups()[0].params()[0])));
        state.exp_avg(state.exp_avg().t().contiguous().t());  // the same values, column-major
        ASSERT_FALSE(state.exp_avg().is_contiguous());
      }
    }
    fused.step();
    adam.step();
  }
  expect_close(ours, theirs, "adam after a state with other strides");  // the first step was fused: float rounding
}

TEST(FusedAdamTest, AGraphThatSavedAParameterFailsOnBackwardAfterTheStep) {
  // As after LibTorch's in-place update: autograd's version counter moved, so stale values are never used.
  Tensors params = fresh(at::kFloat);
  FusedAdam fused(groups_of({params[0], params[1]}, {params[2]}), adam_options(false));
  for (auto& p : params) p.mutable_grad() = at::ones_like(p);
  const auto version = params[0]._version();
  const at::Tensor saved = (params[0] * params[0]).sum();  // mul saves params[0] for its backward
  fused.step();
  EXPECT_GT(params[0]._version(), version);
  EXPECT_THROW(saved.backward(), c10::Error);
}

TEST(FusedAdamTest, TheConfigGivesTheFusedOnesUnlessFusedIsFalse) {
  at::manual_seed(0);
  torch::nn::Linear model(3, 2);
  for (const char* name : {"adam", "adamw"}) {
    Params fused(Json{{"name", name}}, "optimizer");
    const auto chosen = make_optimizer(fused, *model);
    EXPECT_TRUE(std::dynamic_pointer_cast<FusedAdam>(chosen) || std::dynamic_pointer_cast<FusedAdamW>(chosen)) << name;
    Params plain(Json{{"name", name}, {"fused", false}}, "optimizer");
    const auto libtorch = make_optimizer(plain, *model);
    EXPECT_FALSE(std::dynamic_pointer_cast<FusedAdam>(libtorch) || std::dynamic_pointer_cast<FusedAdamW>(libtorch)) << name;
  }
}

}  // namespace
}  // namespace basin
