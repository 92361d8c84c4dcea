// Bi-LoRA against its rule written here with plain tensor ops and autograd
// over 20 steps: one pass a step, the main adapters descending with the
// gradient taken under the auxiliary adapters, which ascend and are clipped
// to rho over all layers; the frozen weights keep their bits and evaluation
// sees no auxiliary adapter; a grad scaler's scale is taken out of the
// ascent and an overflow leaves it undone. (Every parallel mode:
// LoraModeTest; resume, in bf16 microbatches: CheckpointTest.)
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/auxiliary_adapter.h"
#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/callbacks/grad_scaler.h"
#include "basin/core/model/lora.h"
#include "sam_reference.h"
#include "sam_variants.h"
#include "test_util.h"
#include "two_projections.h"

namespace basin {
namespace {

using test::Tensors;

/// The auxiliary adapter Bi-LoRA set on `layer` (null: none).
const AuxiliaryAdapter* auxiliary_adapter(const AdaptableLinear& layer) {
  return dynamic_cast<const AuxiliaryAdapter*>(layer.perturbation());
}

TEST(BiLoraTest, TheAuxiliaryAdaptersAscendAndAreClippedWhileTheMainOnesDescendInOnePass) {
  auto model = std::make_shared<test::TwoProjections>();
  LoraOptions lora;
  lora.r = 2;
  lora.alpha = 3;
  lora.targets = "fc[12]";
  attach_lora(*model, lora, 5);
  const double s = 1.5, rho = 0.08, ascent_lr = 0.5;
  const at::Tensor w1 = model->fc1->weight.detach().clone(), b1 = model->fc1->bias.detach().clone();
  const at::Tensor w2 = model->fc2->weight.detach().clone();
  const Tensors adapters = model->trainable();
  ASSERT_EQ(adapters.size(), 4u);  // A1, B1 of fc1 and fc2
  const Tensors start = test::clone_all(adapters);
  test::RunFacts facts = test::run_facts(9, 20);
  facts.model = model;
  auto bi = test::sam_variant(
      "bi_lora", std::make_shared<torch::optim::SGD>(adapters, torch::optim::SGDOptions(0.05).momentum(0.9)),
      {{"rho", rho}, {"rank", 3}, {"ascent_lr", ascent_lr}}, facts);
  const AuxiliaryAdapter* aux1 = auxiliary_adapter(*model->fc1);
  const AuxiliaryAdapter* aux2 = auxiliary_adapter(*model->fc2);
  ASSERT_TRUE(aux1 != nullptr && aux2 != nullptr);
  ASSERT_EQ(aux1->A.sizes(), (at::IntArrayRef{3, 4}));
  EXPECT_TRUE(aux1->B.eq(0).all().item<bool>() && aux2->B.eq(0).all().item<bool>()) << "no perturbation at first";
  // The auxiliary adapters' start (drawn from the run's seed) is the reference's start too.
  const Tensors aux_start = test::clone_all({aux1->A, aux1->B, aux2->A, aux2->B});

  const test::AdapterRegression data;
  const at::Tensor& x = data.x;
  const at::Tensor& y = data.y;
  EXPECT_EQ(data.train(*bi, *model, 20), 20) << "one pass a step";
  EXPECT_TRUE(model->fc1->weight.equal(w1) && model->fc1->bias.equal(b1) && model->fc2->weight.equal(w2))
      << "the frozen weights moved";
  // Every step but the first is at a perturbed point: the auxiliary B is zero until its first ascent.
  EXPECT_EQ(bi->sam_steps(), 19);

  // The rule written out: W_l + s B1 A1 + s B2 A2; the main adapters take SGD's step, the auxiliary
  // ones ascend by ascent_lr and are scaled by sqrt(rho / c) when c = sqrt(sum ||s B2 A2||^2) > rho.
  Tensors primary = test::clone_all(start), aux = test::clone_all(aux_start);
  test::SgdReference sgd{0.05, 0.9, 0.0, {}};
  int clipped = 0;
  for (int64_t t = 0; t < 20; ++t) {
    Tensors all = primary;
    all.insert(all.end(), aux.begin(), aux.end());
    const test::LossFn loss = [&](const Tensors& v) {
      const at::Tensor xt = x.roll(t, 0);
      const at::Tensor h = (xt.matmul(w1.t()) + b1 + s * xt.matmul(v[0].t()).matmul(v[1].t()) +
                            s * xt.matmul(v[4].t()).matmul(v[5].t())).tanh();
      return (h.matmul(w2.t()) + s * h.matmul(v[2].t()).matmul(v[3].t()) + s * h.matmul(v[6].t()).matmul(v[7].t()) - y)
          .pow(2).mean();
    };
    const Tensors g = test::gradient_at(loss, all);
    sgd.step(primary, {g[0], g[1], g[2], g[3]}, {0.05, 0.05, 0.05, 0.05}, {0.0, 0.0, 0.0, 0.0});
    for (std::size_t i = 0; i < 4; ++i) aux[i] = aux[i] + g[4 + i] * ascent_lr;
    const double c = std::sqrt((s * aux[1].matmul(aux[0])).pow(2).sum().item<double>() +
                               (s * aux[3].matmul(aux[2])).pow(2).sum().item<double>());
    if (c > rho) {
      ++clipped;
      for (auto& a : aux) a = a * std::sqrt(rho / c);
    }
  }
  EXPECT_GT(clipped, 0) << "the clip was reached";
  EXPECT_LT(clipped, 20) << "and not at once";
  test::expect_close(adapters, primary, 1e-6);
  test::expect_close({aux1->A, aux1->B, aux2->A, aux2->B}, aux, 1e-6);
  const double c = std::sqrt((s * aux1->B.matmul(aux1->A)).pow(2).sum().item<double>() +
                             (s * aux2->B.matmul(aux2->A)).pow(2).sum().item<double>());
  EXPECT_LE(c, rho * (1 + 1e-6)) << "the perturbation stays within rho";

  // Evaluation and a forward outside a step see the main adapters alone.
  at::NoGradGuard no_grad;
  const at::Tensor h = (x.matmul(w1.t()) + b1 + s * x.matmul(adapters[0].t()).matmul(adapters[1].t())).tanh();
  const at::Tensor clean = h.matmul(w2.t()) + s * h.matmul(adapters[2].t()).matmul(adapters[3].t());
  model->eval();
  EXPECT_LT((model->forward(x) - clean).abs().max().item<double>(), 1e-6);
  model->train();
  EXPECT_LT((model->forward(x) - clean).abs().max().item<double>(), 1e-6);
}

// Under a grad scaler the auxiliary gradients are unscaled before the
// ascent (a scaled step ends where an unscaled one does), and a step whose
// scaled gradients overflow leaves the auxiliary adapters as they were.
TEST(BiLoraTest, AGradScalerUnscalesTheAuxiliaryGradientsAndAnOverflowLeavesThemAsTheyWere) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({16, 4}), y = at::randn({16, 2});
  auto one_step = [&](double scale, double input_scale) {
    auto model = std::make_shared<test::TwoProjections>();
    LoraOptions lora;
    lora.targets = "fc[12]";
    attach_lora(*model, lora, 5);
    const std::vector<at::Tensor> adapters = model->trainable();
    State state;
    state.seed = 9;
    state.model = model;
    std::shared_ptr<GradScaler> scaler;
    if (scale > 0) {
      GradScalerOptions options;
      options.init_scale = scale;
      scaler = std::make_shared<GradScaler>(options);
      state.scaler = scaler;
    }
    auto bi = make_sam_optimizer("bi_lora", std::make_shared<torch::optim::SGD>(adapters, torch::optim::SGDOptions(0.1)),
                                 {{"rho", 10.0}, {"ascent_lr", 0.5}}, state);
    const at::Tensor before = auxiliary_adapter(*model->fc2)->B.detach().clone();
    bi->step([&] {
      bi->zero_grad();
      const at::Tensor loss = (model->forward(x * input_scale) - y).pow(2).mean();
      (scaler ? scaler->scale(loss) : loss).backward();
      return loss.detach();
    });
    return std::make_tuple(before, auxiliary_adapter(*model->fc2)->B.detach().clone(), bi->skipped_steps());
  };
  const auto [start, unscaled, unscaled_skips] = one_step(0, 1);
  const auto [scaled_start, scaled, scaled_skips] = one_step(1024, 1);
  EXPECT_EQ(unscaled_skips + scaled_skips, 0);
  EXPECT_GT(unscaled.abs().max().item<double>(), 1e-4) << "the auxiliary adapter ascended";
  EXPECT_LT((scaled - unscaled).abs().max().item<double>(), 1e-6) << "the scale was not taken out";
  const auto [overflow_start, overflowed, overflow_skips] = one_step(3e38, 1e3);
  EXPECT_EQ(overflow_skips, 1) << "the overflow did not skip the step";
  EXPECT_TRUE(overflowed.equal(overflow_start)) << "an overflowing step moved the auxiliary adapter";
}

// Without adapters it is refused as flat_lora is (RandomPerturbationTest).
TEST(BiLoraTest, WithAdaptiveItIsRefusedNamingTheKey) {
  auto model = std::make_shared<test::TwoProjections>();
  std::vector<at::Tensor> params = model->parameters();
  test::RunFacts facts = test::run_facts(9, 20);
  facts.model = model;
  test::expect_config_error(
      [&] {
        test::sam_variant("bi_lora", std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1)),
                          {{"adaptive", true}}, facts);
      },
      {"adaptive"}, "adaptive");
}

}  // namespace
}  // namespace basin
