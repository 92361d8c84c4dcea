// The members of the family that perturb at random instead of along the
// gradient: RWP, ARWP and Flat-LoRA against their rules written here with plain
// tensor ops and autograd over 20 steps, with the same seeded noise; the
// noise itself (any split of the rows draws what the whole draws); and
// every parallel mode equal to one process.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/base/seeded_noise.h"
#include "basin/core/model/lora.h"
#include "basin/core/model/model.h"
#include "basin/core/train/trainer.h"
#include "distributed_util.h"
#include "sam_reference.h"
#include "sam_variants.h"
#include "test_util.h"
#include "two_projections.h"

namespace basin {
namespace {

using test::Tensors;

// Rows drawn in any split equal the rows drawn whole, and every (seed, step,
// parameter) draws its own noise: zero3's ranks, each drawing its rows,
// draw what one process draws.
TEST(RandomPerturbationTest, SeededNoiseIsTheSameWhicheverRowsARankDraws) {
  const uint64_t seed = noise_seed(3, 7, 2);
  const at::Tensor whole = seeded_normal_rows(seed, 0, 10, 33);
  EXPECT_TRUE(at::cat({seeded_normal_rows(seed, 0, 4, 33), seeded_normal_rows(seed, 4, 6, 33)}).equal(whole));
  EXPECT_TRUE(seeded_normal_rows(seed, 7, 1, 33).equal(whole.narrow(0, 7, 1)));
  EXPECT_TRUE(seeded_normal_rows(seed, 0, 10, 33).equal(whole)) << "regenerated, the same";
  for (const uint64_t other : {noise_seed(4, 7, 2), noise_seed(3, 8, 2), noise_seed(3, 7, 3)}) {
    EXPECT_FALSE(seeded_normal_rows(other, 0, 10, 33).equal(whole));
  }
  const at::Tensor many = seeded_normal_rows(seed, 0, 400, 250);
  EXPECT_NEAR(many.mean().item<double>(), 0.0, 0.01);
  EXPECT_NEAR(many.std().item<double>(), 1.0, 0.01);
  EXPECT_NEAR((many.abs() < 1).to(at::kDouble).mean().item<double>(), 0.6827, 0.005) << "normal, not just unit variance";
  EXPECT_NEAR((many.abs() < 2).to(at::kDouble).mean().item<double>(), 0.9545, 0.003);
  EXPECT_LT(std::abs(at::corrcoef(at::stack({many[0], many[1]}))[0][1].item<double>()), 0.25) << "rows are independent";
}

/// A two-layer regression with a bias vector: matrices and a vector, as RWP scales them differently.
struct BiasedProblem {
  at::Tensor x, y;
  BiasedProblem() {
    at::manual_seed(12);
    x = at::randn({16, 4});
    y = at::randn({16, 2});
  }
  at::Tensor loss(const Tensors& w, int64_t step) const { return loss(w, step, 0, x.size(0)); }
  /// Over `count` of the step's samples from `first` (a rank's share).
  at::Tensor loss(const Tensors& w, int64_t step, int64_t first, int64_t count) const {
    const at::Tensor rolled = x.roll(step, 0).narrow(0, first, count);
    return ((rolled.matmul(w[0]) + w[1]).tanh().matmul(w[2]) - y.roll(step, 0).narrow(0, first, count)).pow(2).mean();
  }
  Tensors initial() const { return {at::randn({4, 3}), at::randn({3}), at::randn({3, 2})}; }
};

/// RWP's e: per row of a matrix gamma * ||w_row|| * n_row, over a vector gamma * ||w|| * n, n ~ N(0, I) seeded.
/// ARWP's, given the squared gradients' sums s: each row's scale over sqrt(1 + eta * its sum of s) (a
/// vector's rows are its elements).
Tensors rwp_noise(const Tensors& w, uint64_t seed, int64_t step, double gamma, const Tensors& squares = {},
                  double eta = 0) {
  Tensors e;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const int64_t rows = w[i].size(0), width = w[i].numel() / rows;
    const at::Tensor n = seeded_normal_rows(noise_seed(seed, step, static_cast<int64_t>(i)), 0, rows, width);
    at::Tensor scale = w[i].dim() >= 2 ? w[i].reshape({rows, width}).norm(2, {1}, true) : w[i].norm();
    if (!squares.empty()) scale = scale / (1 + eta * squares[i].reshape({rows, width}).sum(1, true)).sqrt();
    e.push_back((n * scale * gamma).view(w[i].sizes()));
  }
  return e;
}

TEST(RandomPerturbationTest, RwpStepsWithTheGradientAtFilterwiseNoiseInOnePass) {
  const BiasedProblem problem;
  Tensors w = test::leaves(problem.initial());
  const Tensors w0 = test::clone_all(w);
  const double gamma = 0.05;
  auto rwp = test::sam_variant("rwp", std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1).momentum(0.9)),
                               {{"gamma", gamma}}, test::run_facts(9));
  int calls = 0;
  for (int64_t t = 0; t < 20; ++t) {
    rwp->step([&] {
      ++calls;
      rwp->zero_grad();
      at::Tensor loss = problem.loss(w, t);
      loss.backward();
      return loss.detach();
    });
  }
  EXPECT_EQ(calls, 20) << "one pass a step";
  EXPECT_EQ(rwp->sam_steps(), 20);

  Tensors expected = test::clone_all(w0);
  test::SgdReference sgd{0.1, 0.9, 0.0, {}};
  for (int64_t t = 0; t < 20; ++t) {
    const test::LossFn loss = [&problem, t](const Tensors& v) { return problem.loss(v, t); };
    const Tensors g = test::gradient_at(loss, test::moved(expected, rwp_noise(expected, 9, t, gamma), 1.0));
    sgd.step(expected, g, {0.1, 0.1, 0.1}, {0.0, 0.0, 0.0});
  }
  test::expect_close(w, expected, 1e-6);
  const Tensors clean = [&] {
    Tensors v = test::clone_all(w0);
    test::SgdReference plain{0.1, 0.9, 0.0, {}};
    for (int64_t t = 0; t < 20; ++t) {
      plain.step(v, test::gradient_at([&problem, t](const Tensors& u) { return problem.loss(u, t); }, v), {0.1, 0.1, 0.1},
                 {0.0, 0.0, 0.0});
    }
    return v;
  }();
  EXPECT_GT((w[0] - clean[0]).abs().max().item<double>(), 1e-4) << "the noise changed the run";
}

TEST(RandomPerturbationTest, ArwpShrinksEachRowsNoiseByItsRunningSquaredGradients) {
  const BiasedProblem problem;
  Tensors w = test::leaves(problem.initial());
  const Tensors w0 = test::clone_all(w);
  const double gamma = 0.2, eta = 0.5, beta = 0.9;
  auto arwp = test::sam_variant("arwp", std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1).momentum(0.9)),
                                {{"gamma", gamma}, {"eta", eta}, {"beta", beta}}, test::run_facts(9));
  int calls = 0;
  for (int64_t t = 0; t < 20; ++t) {
    arwp->step([&] {
      ++calls;
      arwp->zero_grad();
      at::Tensor loss = problem.loss(w, t);
      loss.backward();
      return loss.detach();
    });
  }
  EXPECT_EQ(calls, 20) << "one pass a step";

  // The rule written out: RWP's noise over sqrt(1 + eta * row sums of s); s = g^2 first, then beta s + g^2.
  auto reference = [&](bool adaptive) {
    Tensors expected = test::clone_all(w0), squares;
    test::SgdReference sgd{0.1, 0.9, 0.0, {}};
    for (int64_t t = 0; t < 20; ++t) {
      const test::LossFn loss = [&problem, t](const Tensors& v) { return problem.loss(v, t); };
      const Tensors e = rwp_noise(expected, 9, t, gamma, adaptive ? squares : Tensors{}, eta);
      const Tensors g = test::gradient_at(loss, test::moved(expected, e, 1.0));
      for (std::size_t i = 0; i < g.size(); ++i) {
        if (squares.size() <= i) squares.push_back(g[i] * g[i]);
        else squares[i] = squares[i] * beta + g[i] * g[i];
      }
      sgd.step(expected, g, {0.1, 0.1, 0.1}, {0.0, 0.0, 0.0});
    }
    return expected;
  };
  test::expect_close(w, reference(true), 1e-6);
  EXPECT_GT((w[0] - reference(false)[0]).abs().max().item<double>(), 1e-4) << "the adaptive scale changed the run";
}

// RWP's mixed form as its authors run it, on two ranks: rank 0 takes the
// clean gradient of its half of the batch, rank 1 the perturbed one of its
// half, their losses weighted 2 (1 - lambda) and 2 lambda, so that the
// gradients' average over ranks is lambda g(w + e) + (1 - lambda) g(w);
// against that mix written out.
TEST(RandomPerturbationTest, RwpMixedFormTakesTheCleanAndThePerturbedGradientOnTwoHalvesOfTheRanks) {
  const BiasedProblem problem;
  const Tensors w0 = problem.initial();
  const double gamma = 0.2, lambda = 0.7;
  std::vector<Tensors> trained(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Tensors w = test::leaves(w0);
    State state;
    state.seed = 9;
    state.rank = rank;
    state.world_size = 2;
    state.communicator = communicator;
    auto rwp = make_sam_optimizer("rwp", std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1).momentum(0.9)),
                                  {{"gamma", gamma}, {"mix", lambda}}, state);
    for (int64_t t = 0; t < 20; ++t) {
      rwp->step([&] {
        rwp->zero_grad();
        const at::Tensor loss = problem.loss(w, t, rank * 8, 8);
        (loss * rwp->request().loss_weight).backward();
        std::vector<at::Tensor> grads;
        for (const auto& p : w) grads.push_back(p.grad());
        communicator->all_reduce_sum(grads);  // in place: the ranks' average, as data-parallel training takes it
        for (auto& g : grads) g.div_(2);
        return loss.detach();
      });
    }
    // The clean ranks' steps are SAM steps too: the job's pass is perturbed on the other half.
    EXPECT_EQ(rwp->sam_steps(), 20) << "rank " << rank;
    trained[static_cast<std::size_t>(rank)] = test::clone_all(w);
  });

  auto reference = [&](double perturbed_share) {
    Tensors expected = test::clone_all(w0);
    test::SgdReference sgd{0.1, 0.9, 0.0, {}};
    for (int64_t t = 0; t < 20; ++t) {
      const Tensors clean = test::gradient_at([&](const Tensors& v) { return problem.loss(v, t, 0, 8); }, expected);
      const Tensors perturbed = test::gradient_at([&](const Tensors& v) { return problem.loss(v, t, 8, 8); },
                                                  test::moved(expected, rwp_noise(expected, 9, t, gamma), 1.0));
      Tensors mixed;
      for (std::size_t i = 0; i < clean.size(); ++i) mixed.push_back(perturbed[i] * perturbed_share + clean[i] * (1 - perturbed_share));
      sgd.step(expected, mixed, {0.1, 0.1, 0.1}, {0.0, 0.0, 0.0});
    }
    return expected;
  };
  const Tensors expected = reference(lambda);
  test::expect_close(trained[0], expected, 1e-6);
  test::expect_close(trained[1], expected, 1e-6);
  EXPECT_GT((trained[0][0] - reference(0.5)[0]).abs().max().item<double>(), 1e-4) << "lambda weighs the halves";
}

// In the trainer: the replicas of the mixed form never drift under ddp,
// zero1 and zero2 step as ddp does, lambda weighs the halves, and where it cannot run (one process, zero3's
// gathered units) it is refused naming the key.
TEST(RandomPerturbationTest, RwpMixedFormRunsUnderDdpZeroOneAndTwoAndIsRefusedElsewhere) {
  Json config = test::sam_config("{}", "none");
  config["algorithms"] = Json::parse(R"({"rwp": {"gamma": 0.05, "mix": 0.5}})");
  config.erase("parallel");
  test::expect_config_error([&] { Trainer one(config); }, {"algorithms.rwp.mix", "two halves"}, "one process");
  config["data"]["batch_size"] = 16;
  config["parallel"] = {{"mode", "ddp"}, {"timeout_seconds", 60}};
  const auto ddp = test::train_on_ranks(2, config);
  EXPECT_TRUE(ddp[0].size() == ddp[1].size() && test::max_difference(ddp[0], ddp[1]) == 0) << "the replicas drifted";
  config["parallel"]["mode"] = "zero2";
  EXPECT_LT(test::max_difference(test::train_on_ranks(2, config)[1], ddp[0]), 1e-5) << "zero2 against ddp";
  config["parallel"]["mode"] = "zero1";
  EXPECT_LT(test::max_difference(test::train_on_ranks(2, config)[1], ddp[0]), 1e-5) << "zero1 against ddp";
  // The trainer's closure weights the halves' losses: another lambda trains elsewhere.
  config["parallel"]["mode"] = "ddp";
  config["algorithms"]["rwp"]["mix"] = 0.8;
  EXPECT_GT(test::max_difference(test::train_on_ranks(2, config)[0], ddp[0]), 1e-5) << "lambda was not applied";
  config["parallel"]["mode"] = "zero3";
  test::expect_config_error([&] { test::train_on_ranks(2, config); }, {"algorithms.rwp.mix", "zero3"}, "zero3");
  config["algorithms"] = Json::parse(R"({"arwp": {"mix": 0.5}})");
  config["parallel"]["mode"] = "ddp";
  test::expect_config_error([&] { test::train_on_ranks(2, config); }, {"mix", "arwp"}, "arwp");
}

TEST(RandomPerturbationTest, RwpRefusesRhoAndAdaptive) {
  const BiasedProblem problem;
  Tensors w = test::leaves(problem.initial());
  auto base = [&] { return std::make_shared<torch::optim::SGD>(w, torch::optim::SGDOptions(0.1)); };
  EXPECT_THROW(test::sam_variant("rwp", base(), {{"rho", 0.05}}), ConfigError);
  EXPECT_THROW(test::sam_variant("rwp", base(), {{"adaptive", true}}), ConfigError);
  EXPECT_THROW(test::sam_variant("rwp", base(), {{"gamma", -1}}), ConfigError);
}

// Every parallel mode draws the noise one process draws (zero3 each rank
// its rows, the vectors' norms summed over ranks): two ranks equal one
// process over the joined batch.
class RandomModeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RandomModeTest, UnderEveryModeEqualsOneProcess) {
  Json config = test::sam_config("{}", "none");
  config["algorithms"] = {{GetParam(), {{"gamma", 0.05}}}};
  config.erase("parallel");
  config["data"]["batch_size"] = 32;
  Trainer one(config);
  one.fit();
  const test::Weights reference = test::weights_of(one);
  config["data"]["batch_size"] = 16;
  for (const std::string mode : {"ddp", "zero1", "zero2", "zero3"}) {
    config["parallel"] = {{"mode", mode}, {"timeout_seconds", 60}};
    const auto ranks = test::train_on_ranks(2, config);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_LT(test::max_difference(ranks[static_cast<std::size_t>(rank)], reference), 1e-5)
          << mode << " against one process, rank " << rank;
    }
  }
}

// RWP's noise, drawn on every rank; ARWP's, drawn by the owners of its running squares (zero1, zero2)
// and gathered, or by each rank for its rows (zero3).
INSTANTIATE_TEST_SUITE_P(Rules, RandomModeTest, ::testing::Values("rwp", "arwp"));

/// Flat-LoRA's noise on layer l's W at step t, written out: row i of
/// W' = W + s B A gives sigma_t ||W'_i|| / sqrt(in), sigma_t rising as (1 - cos(pi t / T)) / 2.
at::Tensor flat_lora_noise(const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double s, double rho,
                           int64_t t, int64_t steps, int64_t layer, uint64_t seed) {
  const double sigma = rho * (1 - std::cos(std::acos(-1.0) * static_cast<double>(t) / static_cast<double>(steps))) / 2;
  const at::Tensor merged = w + s * b.matmul(a);
  const at::Tensor row_std = merged.norm(2, {1}, true) * sigma / std::sqrt(static_cast<double>(w.size(1)));
  return seeded_normal_rows(noise_seed(seed, t, layer), 0, w.size(0), w.size(1)) * row_std;
}

TEST(RandomPerturbationTest, FlatLoraTrainsTheAdaptersUnderSeededNoiseOnTheFrozenWeights) {
  auto model = std::make_shared<test::TwoProjections>();
  LoraOptions lora;
  lora.r = 2;
  lora.alpha = 3;
  lora.targets = "fc[12]";
  lora.init = LoraInit::kGaussian;
  attach_lora(*model, lora, 5);
  const double s = 1.5, rho = 0.3;
  const at::Tensor w1 = model->fc1->weight.detach().clone(), b1 = model->fc1->bias.detach().clone();
  const at::Tensor w2 = model->fc2->weight.detach().clone();
  const Tensors adapters = model->trainable();
  ASSERT_EQ(adapters.size(), 4u);  // A1, B1, A2, B2
  const Tensors start = test::clone_all(adapters);
  test::RunFacts facts = test::run_facts(9, 20);
  facts.model = model;
  auto flat = test::sam_variant(
      "flat_lora", std::make_shared<torch::optim::SGD>(adapters, torch::optim::SGDOptions(0.05).momentum(0.9)),
      {{"rho", rho}}, facts);
  const test::AdapterRegression data;
  const at::Tensor& x = data.x;
  const at::Tensor& y = data.y;
  EXPECT_EQ(data.train(*flat, *model, 20), 20) << "one pass a step";
  // Every step but the first is at a perturbed point: the noise's cosine rises from 0.
  EXPECT_EQ(flat->sam_steps(), 19);
  EXPECT_TRUE(model->fc1->weight.equal(w1) && model->fc1->bias.equal(b1) && model->fc2->weight.equal(w2))
      << "the frozen weights moved";

  auto reference = [&](double noise_rho) {
    Tensors expected = test::clone_all(start);
    test::SgdReference sgd{0.05, 0.9, 0.0, {}};
    for (int64_t t = 0; t < 20; ++t) {
      const at::Tensor e1 = flat_lora_noise(w1, expected[0], expected[1], s, noise_rho, t, 20, 0, 9);
      const at::Tensor e2 = flat_lora_noise(w2, expected[2], expected[3], s, noise_rho, t, 20, 1, 9);
      const test::LossFn loss = [&](const Tensors& v) {
        const at::Tensor xt = x.roll(t, 0);
        const at::Tensor h = (xt.matmul((w1 + e1).t()) + b1 + s * xt.matmul(v[0].t()).matmul(v[1].t())).tanh();
        return (h.matmul((w2 + e2).t()) + s * h.matmul(v[2].t()).matmul(v[3].t()) - y).pow(2).mean();
      };
      sgd.step(expected, test::gradient_at(loss, expected), {0.05, 0.05, 0.05, 0.05}, {0.0, 0.0, 0.0, 0.0});
    }
    return expected;
  };
  test::expect_close(adapters, reference(rho), 1e-6);
  EXPECT_GT((adapters[1] - reference(0.0)[1]).abs().max().item<double>(), 1e-4) << "the noise changed the run";

  // Evaluation and a forward outside a step see no noise: the adapted model as it is.
  model->eval();
  at::NoGradGuard no_grad;
  const at::Tensor h = (x.matmul(w1.t()) + b1 + s * x.matmul(adapters[0].t()).matmul(adapters[1].t())).tanh();
  const at::Tensor clean = h.matmul(w2.t()) + s * h.matmul(adapters[2].t()).matmul(adapters[3].t());
  EXPECT_LT((model->forward(x) - clean).abs().max().item<double>(), 1e-6);
  model->train();
  EXPECT_LT((model->forward(x) - clean).abs().max().item<double>(), 1e-6);
}

TEST(RandomPerturbationTest, TheAdapterRulesWithoutAdaptersAreRefusedNamingTheKey) {
  auto model = std::make_shared<test::TwoProjections>();
  std::vector<at::Tensor> params = model->parameters();
  test::RunFacts facts = test::run_facts(9, 20);
  facts.model = model;
  int checked = 0;
  for (const auto& name : sam_family_registry().names()) {
    if (!test::needs_adapters(name)) continue;
    ++checked;
    test::expect_config_error(
        [&] {
          test::sam_variant(name, std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1)),
                            Json::object(), facts);
        },
        {"adapters.lora", name}, name + " with no adapters");
  }
  EXPECT_EQ(checked, 2) << "flat_lora and bi_lora";
}

}  // namespace
}  // namespace basin
