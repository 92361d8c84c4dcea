// SAF and MESA, the loss-side members of the SAM family: the added term
// against a KL divergence and its gradient written here with plain tensor
// ops, the bank and the weight average against what the test records during
// a real run, the passes each takes, and training.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/module.h>

#include "basin/algorithms/loss/mesa.h"
#include "basin/algorithms/loss/saf.h"
#include "basin/core/engine/callback.h"
#include "basin/core/engine/engine.h"
#include "basin/core/train/trainer.h"
#include "test_util.h"

namespace basin {
namespace {

TEST(TrajectoryLossTest, TermIsLambdaTauSquaredTimesTheMeanKlAndItsGradientIsTauTimesPMinusPref) {
  at::manual_seed(5);
  const at::Tensor outputs = at::randn({6, 4}, at::kDouble).requires_grad_(true);
  const at::Tensor reference = at::randn({6, 4}, at::kDouble);
  const double lambda = 0.3, tau = 5;
  const at::Tensor term = TrajectoryLoss::term(outputs, reference, lambda, tau);
  // KL(p_ref || p) by its definition, with softmax written out.
  const auto softmax = [tau](const at::Tensor& z) { return (z / tau).exp() / (z / tau).exp().sum(1, true); };
  const at::Tensor p = softmax(outputs.detach()), p_ref = softmax(reference);
  const double kl = (p_ref * (p_ref / p).log()).sum(1).mean().item<double>();
  EXPECT_NEAR(term.item<double>(), lambda * tau * tau * kl, 1e-5 * std::abs(term.item<double>()) + 1e-7);
  // d/dz of lambda tau^2 KL(p_ref || softmax(z / tau)) = lambda tau (p - p_ref), over the mean's 6 samples.
  const at::Tensor grad = torch::autograd::grad({term}, {outputs})[0];
  EXPECT_TRUE(at::allclose(grad.to(at::kDouble), (p - p_ref) * (lambda * tau / 6), 1e-4, 1e-6));
  // Samples left out count 0 in the mean over all 6.
  const at::Tensor counted = at::tensor({1, 0, 1, 1, 0, 1}).to(at::kBool);
  const double partial = (p_ref * (p_ref / p).log()).sum(1).mul(counted.to(at::kDouble)).sum().item<double>() / 6;
  EXPECT_NEAR(TrajectoryLoss::term(outputs, reference, lambda, tau, counted).item<double>(),
              lambda * tau * tau * partial, 1e-5 * lambda * tau * tau * partial + 1e-7);
}

/// Records, by (epoch, sample id), the outputs of every pass's microbatches,
/// and checks each microbatch's loss after the algorithms added to it.
struct Probe : Callback {
  std::string name() const override { return "probe"; }
  std::function<at::Tensor(const State&)> expected_term;  // none: the term is checked absent
  std::map<std::pair<int64_t, int64_t>, at::Tensor> outputs;
  int forwards = 0, checked = 0, with_term = 0;
  at::Tensor cross_entropy;
  bool on_before_forward(const State&, Logger&) override {
    ++forwards;
    return false;
  }
  bool on_after_loss(const State& state, Logger&) override {
    const at::Tensor z = state.outputs.detach().to(at::kFloat);
    for (int64_t i = 0; i < z.size(0); ++i) {
      outputs[{state.timestamp.epoch, state.microbatch.ids[i].item<int64_t>()}] = z[i].clone();
    }
    double expected = at::cross_entropy_loss(z, state.microbatch.targets).item<double>() /
                      state.microbatch_divisor;
    const at::Tensor term = expected_term ? expected_term(state) : at::Tensor();
    if (term.defined()) {
      expected += term.item<double>() / state.microbatch_divisor;
      ++with_term;
    }
    EXPECT_NEAR(state.loss.item<double>(), expected, 1e-5) << "epoch " << state.timestamp.epoch;
    ++checked;
    return false;
  }
};

Json loss_side_config(const std::string& name, const std::string& keys) {
  Json config = test::smoke_config();
  config["max_epochs"] = 4;
  config["algorithms"] = Json::object();
  config["algorithms"][name] = Json::parse(keys);
  return config;
}

TEST(TrajectoryLossTest, SafAddsTheKlToTheSameSamplesOutputsFromEpochsAgo) {
  auto probe = std::make_shared<Probe>();
  const double lambda = 0.5, tau = 2;
  int64_t uncounted = 0;
  // The outputs E = 2 epochs back, as the probe itself recorded them, for the
  // samples that epoch visited; the term after epoch 1.
  probe->expected_term = [&probe, &uncounted, lambda, tau](const State& state) -> at::Tensor {
    if (state.timestamp.epoch <= 1) return {};
    std::vector<at::Tensor> past;
    std::vector<bool> counted;
    for (int64_t i = 0; i < state.microbatch.ids.size(0); ++i) {
      const auto found = probe->outputs.find({state.timestamp.epoch - 2, state.microbatch.ids[i].item<int64_t>()});
      counted.push_back(found != probe->outputs.end());
      past.push_back(counted.back() ? found->second : at::zeros({state.outputs.size(1)}));
      uncounted += !counted.back();
    }
    const at::Tensor mask = at::tensor(std::vector<int64_t>(counted.begin(), counted.end())).to(at::kBool);
    return TrajectoryLoss::term(state.outputs.detach(), at::stack(past), lambda, tau, mask);
  };
  Json config = loss_side_config("saf", R"({"lambda": 0.5, "temperature": 2, "epochs_ago": 2, "start_epoch": 1})");
  config["data"]["train_size"] = 120;  // 7 batches of 16: each epoch drops 8 samples, others each time
  config["data"]["shuffle"] = true;
  config["data"]["microbatches"] = 2;
  Trainer trainer(config, {probe});
  const FitSummary summary = trainer.fit();
  EXPECT_EQ(probe->checked, summary.steps * 2);
  EXPECT_EQ(probe->forwards, summary.steps * 2);  // one pass a step: no forward of its own
  EXPECT_EQ(probe->with_term, 2 * 7 * 2);         // epochs 2 and 3 of 0..3
  EXPECT_GT(uncounted, 0);                        // samples the epoch back skipped were met
  const auto& saf = dynamic_cast<const SAF&>(*trainer.engine().algorithms().front());
  ASSERT_EQ(saf.bank().sizes(), (std::vector<int64_t>{120, 3, 3}));
}

/// The trainer's forward, counted: MESA runs its averaged weights through it.
struct ForwardCounter : Callback {
  std::string name() const override { return "forward_counter"; }
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  void install(State& state) override {
    auto inner = state.forward;
    auto calls_ = calls;
    state.forward = [inner, calls_](const at::Tensor& inputs) {
      ++*calls_;
      return inner(inputs);
    };
  }
};

TEST(TrajectoryLossTest, MesaAveragesTheWeightsAndAddsTheKlToTheAverageOutputs) {
  const double decay = 0.8, lambda = 0.6, tau = 3;
  Json config = loss_side_config("mesa", R"({"lambda": 0.6, "temperature": 3, "decay": 0.8, "start_epoch": 1})");
  config["max_epochs"] = 3;
  config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");  // BatchNorm: buffers averaged too
  // The average, kept by the test from the weights after each step.
  struct Average : Callback {
    std::string name() const override { return "average"; }
    double decay = 0;
    std::vector<at::Tensor> average;
    bool on_fit_start(const State& state, Logger&) override {
      for (const auto& t : tensors(state)) average.push_back(t.detach().clone());
      return false;
    }
    bool on_after_step(const State& state, Logger&) override {
      const auto now = tensors(state);
      for (std::size_t i = 0; i < now.size(); ++i) {
        average[i] = at::isFloatingType(now[i].scalar_type()) ? average[i] * decay + now[i].detach() * (1 - decay)
                                                              : now[i].clone();
      }
      return false;
    }
    static std::vector<at::Tensor> tensors(const State& state) {
      std::vector<at::Tensor> all = state.model->parameters();
      for (const auto& b : state.model->buffers()) all.push_back(b);
      return all;
    }
  };
  auto average = std::make_shared<Average>();
  average->decay = decay;
  auto counter = std::make_shared<ForwardCounter>();
  auto probe = std::make_shared<Probe>();
  // A second model of the same config holds the test's average: its outputs in eval mode are the reference.
  Trainer twin(config);
  probe->expected_term = [&](const State& state) -> at::Tensor {
    if (state.timestamp.epoch <= 1) return {};
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> twin_tensors = twin.model().parameters();
    for (const auto& b : twin.model().buffers()) twin_tensors.push_back(b);
    for (std::size_t i = 0; i < twin_tensors.size(); ++i) twin_tensors[i].copy_(average->average[i]);
    twin.model().eval();
    const at::Tensor reference = twin.model().forward(state.microbatch.inputs);
    return TrajectoryLoss::term(state.outputs.detach(), reference, lambda, tau);
  };
  Trainer trainer(config, {average, counter, probe});
  const FitSummary summary = trainer.fit();
  EXPECT_EQ(probe->with_term, 8);        // epoch 2 of 0..2
  EXPECT_EQ(*counter->calls, 8);         // one extra forward in each step with the term, none before
  EXPECT_EQ(probe->forwards, summary.steps);
  const auto& mesa = dynamic_cast<const MESA&>(*trainer.engine().algorithms().front());
  ASSERT_EQ(mesa.averages().size(), average->average.size());
  for (std::size_t i = 0; i < average->average.size(); ++i) {
    EXPECT_TRUE(at::allclose(mesa.averages()[i].to(at::kDouble), average->average[i].to(at::kDouble), 1e-5, 1e-6))
        << "tensor " << i;
  }
}

// Under autocast the averages' low-precision copies must not stand in for the
// weights in the model's own forward: with lambda 0 MESA changes nothing.
TEST(TrajectoryLossTest, MesaWithLambdaZeroLeavesBf16TrainingAsItWas) {
  Json config = loss_side_config("mesa", R"({"lambda": 0, "start_epoch": -1, "decay": 0.5})");
  config["precision"] = "amp_bf16";
  config["max_epochs"] = 1;
  Trainer with(config);
  with.fit();
  config["algorithms"] = Json::object();
  Trainer without(config);
  without.fit();
  const auto a = with.model().parameters(), b = without.model().parameters();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
}

// A tensor registered under two names is averaged once and keeps its own storage.
TEST(TrajectoryLossTest, MesaSwapsATiedWeightOnceAndGivesItBack) {
  struct Tied : torch::nn::Module {
    at::Tensor w;
    Tied() {
      w = register_parameter("encoder", at::randn({4, 4}));
      register_parameter("decoder", w);
    }
  };
  auto model = std::make_shared<Tied>();
  State state;
  state.model = model;
  state.forward = [model](const at::Tensor& x) { return x.matmul(model->w).matmul(model->w.t()); };
  state.train_size = 8;
  Engine engine(state);
  Params algorithms(Json::parse(R"({"mesa": {"start_epoch": -1, "decay": 0.5}})"), "algorithms");
  engine.add_algorithms(algorithms);
  engine.run(Event::FIT_START);
  const void* storage = model->w.data_ptr();
  const at::Tensor before = model->w.detach().clone();
  state.microbatch = {at::randn({8, 4}), at::randint(0, 4, {8}), at::arange(8)};
  engine.run(Event::BEFORE_FORWARD);
  EXPECT_EQ(model->w.data_ptr(), storage);
  EXPECT_TRUE(at::equal(model->w, before));
  const auto& mesa = dynamic_cast<const MESA&>(*engine.algorithms().front());
  EXPECT_EQ(mesa.averages().size(), 1u);
}

class LossSideTrainingTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(LossSideTrainingTest, TrainsTheSyntheticRunWithMicrobatchesBf16TheGradScalerAndSam) {
  Json config = loss_side_config(GetParam().first, GetParam().second);
  auto losses = std::make_shared<test::LossRecorder>();
  const FitSummary summary = Trainer(config, {losses}).fit();
  const auto mean = [](auto begin, auto end) { return std::accumulate(begin, end, 0.0) / std::distance(begin, end); };
  EXPECT_LT(mean(losses->losses.end() - 4, losses->losses.end()), mean(losses->losses.begin(), losses->losses.begin() + 4));
  EXPECT_GT(summary.test_accuracy, 0.4);
  test::expect_microbatches_match_one_batch(config);
  config["precision"] = "amp_bf16";
  const FitSummary mixed = Trainer(config).fit();
  EXPECT_TRUE(std::isfinite(mixed.final_train_loss));
  config["precision"] = "fp32";
  test::expect_overflowed_steps_skipped(config);
  // With SAM around it: the term is in both passes' losses.
  config["precision"] = "fp32";
  config["algorithms"]["sam"] = Json::object();
  EXPECT_TRUE(std::isfinite(Trainer(config).fit().final_train_loss));
}

INSTANTIATE_TEST_SUITE_P(LossSide, LossSideTrainingTest, ::testing::ValuesIn(test::loss_side_family()),
                         [](const auto& info) { return info.param.first; });

TEST(TrajectoryLossTest, BadKeysAreNamed) {
  for (const auto& [name, keys, expected] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"saf", R"({"lambda": -1})", "'algorithms.saf.lambda'"},
           {"saf", R"({"epochs_ago": 0})", "'algorithms.saf.epochs_ago'"},
           {"mesa", R"({"decay": 1})", "'algorithms.mesa.decay'"},
           {"mesa", R"({"temperature": 0})", "'algorithms.mesa.temperature'"},
           {"mesa", R"({"rho": 0.1})", "'algorithms.mesa.rho'"}}) {
    const std::string message = test::config_error_of([&] { Trainer(loss_side_config(name, keys)).fit(); });
    EXPECT_NE(message.find(expected), std::string::npos) << name << " " << keys << ": " << message;
  }
}

}  // namespace
}  // namespace basin
