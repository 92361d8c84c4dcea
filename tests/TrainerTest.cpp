#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <utility>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/optim/sgd.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/engine/callback.h"
#include "basin/core/model/model.h"
#include "basin/core/parallel/zero/sharded_optimizer.h"
#include "basin/core/train/step_checks.h"
#include "basin/core/train/trainer.h"
#include "test_util.h"

namespace basin {
namespace {

std::vector<float> losses_of(const Json& config) {
  auto recorder = std::make_shared<test::LossRecorder>();
  Trainer trainer(config, {recorder});
  trainer.fit();
  return recorder->losses;
}

TEST(TrainerTest, SameConfigAndSeedGiveIdenticalLosses) {
  Json config = test::smoke_config();
  config["model"] = Json::parse(R"({"name": "cnn", "channels": [4], "hidden": 8})");
  const auto first = losses_of(config);
  const auto second = losses_of(config);
  ASSERT_EQ(first.size(), 16u);  // 128 samples / 16 per batch * 2 epochs
  EXPECT_EQ(first, second);
  config["seed"] = 4;
  EXPECT_NE(first, losses_of(config));
}

// The cnn convolves channels-last copies of its activations and weights
// (oneDNN's faster kernels) while its parameters and their gradients stay
// contiguous: it trains as the contiguous cnn does, to float rounding.
TEST(TrainerTest, TheChannelsLastCnnTrainsAsTheContiguousOneAndKeepsItsTensorsContiguous) {
  Json config = test::smoke_config();
  config["data"]["input_shape"] = {3, 8, 8};
  config["model"] = Json::parse(R"({"name": "cnn", "channels": [4, 6], "hidden": 8})");
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  Json contiguous = config;
  contiguous["model"]["channels_last"] = false;
  const auto fast_losses = std::make_shared<test::LossRecorder>(), plain_losses = std::make_shared<test::LossRecorder>();
  Trainer fast(config, {fast_losses}), plain(contiguous, {plain_losses});
  fast.fit();
  plain.fit();
  ASSERT_EQ(fast_losses->losses.size(), plain_losses->losses.size());
  for (std::size_t i = 0; i < fast_losses->losses.size(); ++i) {
    EXPECT_NEAR(fast_losses->losses[i], plain_losses->losses[i], 1e-5) << "step " << i;
  }
  const auto fast_params = fast.model().parameters(), plain_params = plain.model().parameters();
  ASSERT_EQ(fast_params.size(), plain_params.size());
  for (std::size_t i = 0; i < fast_params.size(); ++i) {
    EXPECT_TRUE(at::allclose(fast_params[i], plain_params[i], 1e-4, 1e-5)) << "parameter " << i;
    EXPECT_TRUE(fast_params[i].is_contiguous()) << "parameter " << i;
    EXPECT_TRUE(!fast_params[i].grad().defined() || fast_params[i].grad().is_contiguous()) << "gradient " << i;
  }
}

TEST(TrainerTest, TrainingReducesTheLossAndEvaluates) {
  Json config = test::smoke_config();
  config["max_epochs"] = 6;
  Trainer trainer(config);
  const FitSummary summary = trainer.fit();
  EXPECT_EQ(summary.steps, 48);
  EXPECT_EQ(summary.epochs, 6);
  EXPECT_LT(summary.final_train_loss, std::log(3.0) * 0.8);  // well below chance (ln 3)
  EXPECT_GT(summary.test_accuracy, 0.5);                      // chance is 1/3
}

TEST(TrainerTest, MaxStepsStopsMidEpoch) {
  Json config = test::smoke_config();
  config["max_steps"] = 5;
  Trainer trainer(config);
  const FitSummary summary = trainer.fit();
  EXPECT_EQ(summary.steps, 5);
  EXPECT_EQ(summary.epochs, 1);
  EXPECT_GE(summary.test_accuracy, 0.0);  // evaluated even though the epoch was cut short
}

class StopAfterThree : public Callback {
 public:
  std::string name() const override { return "stop_after_three"; }
  bool on_batch_end(const State& state, Logger&) override { return state.timestamp.step >= 3; }
};

TEST(TrainerTest, CallbackCanStopTraining) {
  Trainer trainer(test::smoke_config(), {std::make_shared<StopAfterThree>()});
  EXPECT_EQ(trainer.fit().steps, 3);
}

TEST(TrainerTest, BadConfigsNameTheKeyBeforeTraining) {
  auto with = [](const std::string& key, const Json& value) {
    Json config = test::smoke_config();
    apply_override(config, key + "=" + value.dump());
    return config;
  };
  struct Case {
    Json config;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {with("optimizer.lr", -0.1), "'optimizer.lr'"},
      {with("data.batch_size", 0), "'data.batch_size'"},
      {with("data.microbatches", 3), "'data.microbatches'"},
      {with("model.name", "transformer"), "known: cnn, gemma2, gemma3, gpt, llama, mistral, mlp, qwen2, qwen3, resnet, torchscript"},
      {with("data.name", "imagenet"), "fashion_mnist"},
      {with("optimizer.name", "lion"), "adagrad, adam"},
      {with("max_epochs", "two"), "'max_epochs'"},
      {with("epochs", 2), "'epochs' is not known"},
      {with("data.label_noise", 1.5), "'data.label_noise'"},
      {with("algorithms", Json::parse(R"({"magic": {}})")), "unknown algorithm 'magic'"},
      {with("callbacks", Json::parse(R"({"confetti": {}})")), "unknown callback 'confetti'"},
      {with("schedulers", Json::parse(R"([{"name": "cosine_warmup", "hyperparameter": "rho"}])")),
       "'schedulers[0].hyperparameter'"},
      {with("schedulers", Json::parse(R"([{"name": "step"}])")), "'schedulers[0].step_size' is required"},
      {with("precision", "fp8"), "'precision'"},
      {with("loss", "hinge"), "config key 'loss'"},
      {with("loss", Json::parse(R"({"name": "mse", "label_smoothing": 0.1})")), "'loss.label_smoothing' is not known"},
      {with("loss", Json::parse(R"({"name": "cross_entropy", "label_smoothing": 2})")), "'loss.label_smoothing'"},
  };
  for (const auto& c : cases) {
    const std::string message = test::trainer_config_error(c.config);
    EXPECT_NE(message.find(c.expected), std::string::npos) << "expected " << c.expected << " in: " << message;
  }
}

/// The trainer's test loss for `loss`, and the same written out by hand
/// from the model's logits on the test set.
std::pair<double, double> test_loss_and_formula(const Json& loss,
                                                const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& formula) {
  Json config = test::smoke_config();
  config["loss"] = loss;
  config["max_steps"] = 3;
  Trainer trainer(config);
  trainer.fit();
  const double reported = trainer.evaluate().loss;
  at::NoGradGuard no_grad;
  trainer.model().eval();
  const at::Tensor logits = trainer.model().forward(trainer.data().test.inputs()).to(at::kDouble);
  const at::Tensor targets = trainer.data().test.targets();
  return {reported, formula(logits, targets).mean().item<double>()};
}

TEST(TrainerTest, TheLossComesFromTheConfig) {
  // Cross-entropy with label smoothing eps: (1 - eps) (-log p_y) + eps * mean over classes of -log p_c.
  const double eps = 0.5;
  const auto smoothed = test_loss_and_formula(Json::parse(R"({"name": "cross_entropy", "label_smoothing": 0.5})"),
                                              [eps](const at::Tensor& logits, const at::Tensor& targets) {
                                                const at::Tensor log_p = logits.log_softmax(1);
                                                const at::Tensor nll = -log_p.gather(1, targets.unsqueeze(1)).squeeze(1);
                                                return (1 - eps) * nll + eps * (-log_p.mean(1));
                                              });
  EXPECT_NEAR(smoothed.first, smoothed.second, 1e-5);
  // The default is plain cross-entropy, and differs.
  const auto plain = test_loss_and_formula(Json("cross_entropy"), [](const at::Tensor& logits, const at::Tensor& targets) {
    return -logits.log_softmax(1).gather(1, targets.unsqueeze(1)).squeeze(1);
  });
  EXPECT_NEAR(plain.first, plain.second, 1e-5);
  EXPECT_GT(std::abs(plain.first - smoothed.first), 1e-4);  // nearly uniform outputs after 3 steps: close
  // MSE: the mean over the classes of (logit - one_hot)^2.
  const auto mse = test_loss_and_formula(Json("mse"), [](const at::Tensor& logits, const at::Tensor& targets) {
    const at::Tensor one_hot = at::zeros_like(logits).scatter_(1, targets.unsqueeze(1), 1.0);
    return (logits - one_hot).pow(2).mean(1);
  });
  EXPECT_NEAR(mse.first, mse.second, 1e-5);
}

/// Every parameter on one rank: the norm "over shards" is one rank's sum.
class OneRankShards : public ShardedParameters {
 public:
  ParameterPlacement placement(const at::Tensor&) const override {
    return {Placement::replicated(), Placement::replicated(), Placement::owned_by(0)};
  }
  bool owns(const at::Tensor&) const override { return true; }
  int64_t first_row(const at::Tensor&) const override { return 0; }
  void broadcast_parameters() override {}
  void broadcast_from_owners(const std::vector<at::Tensor>&, const std::vector<at::Tensor>&) override {}
  Communicator& communicator() override { return *communicator_; }

 private:
  std::shared_ptr<Communicator> communicator_ =
      make_gloo_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, std::chrono::seconds(30));
};

TEST(TrainerTest, ClippingNormsAndScalesATiedWeightOnce) {
  at::Tensor w = at::ones({4}).requires_grad_();
  // The one tensor listed twice, as a tied weight is when an optimizer is given each of its names.
  auto sgd = std::make_shared<torch::optim::SGD>(std::vector<at::Tensor>{w, w}, torch::optim::SGDOptions(0.1));
  Params root(Json::parse(R"({"grad_clip_norm": 1.5})"), "");
  StepChecks checks(root);
  State state;
  state.optimizer = sgd;
  OneRankShards shards;
  for (ShardedParameters* sharded : {static_cast<ShardedParameters*>(nullptr), static_cast<ShardedParameters*>(&shards)}) {
    w.mutable_grad() = at::full({4}, 3.0);  // ||g|| = 6
    checks.pass_hooks(state, sharded).before_base_step();
    // Clipped to 1.5 once: each element 3 * 1.5 / 6. Counted twice the norm
    // would be 6 sqrt(2), and scaled twice each element 3 * (1.5 / 8.49)^2.
    EXPECT_NEAR(w.grad()[0].item<double>(), 0.75, 1e-5) << (sharded ? "over shards" : "replicated");
    EXPECT_NEAR(w.grad().norm().item<double>(), 1.5, 1e-5);
  }
}

// Records the lr group 0 had at every step.
class LrRecorder : public Callback {
 public:
  std::string name() const override { return "lr_recorder"; }
  bool on_before_step(const State& state, Logger&) override {
    lrs.push_back(state.optimizer->param_groups()[0].options().get_lr());
    return false;
  }
  std::vector<double> lrs;
};

TEST(TrainerTest, PerStepAndPerEpochSchedulers) {
  Json config = test::smoke_config();
  config["max_epochs"] = 3;
  config["schedulers"] = Json::parse(R"([{"name": "step", "step_size": 1, "gamma": 0.5, "interval": "epoch"}])");
  auto per_epoch = std::make_shared<LrRecorder>();
  Trainer(config, {per_epoch}).fit();
  ASSERT_EQ(per_epoch->lrs.size(), 24u);  // 8 steps per epoch
  for (std::size_t i = 0; i < 24; ++i) EXPECT_DOUBLE_EQ(per_epoch->lrs[i], 0.1 * std::pow(0.5, i / 8)) << i;

  config["schedulers"] = Json::parse(R"([{"name": "linear_warmup", "warmup": 4}])");
  auto per_step = std::make_shared<LrRecorder>();
  Trainer(config, {per_step}).fit();
  for (std::size_t i = 0; i < 6; ++i) EXPECT_NEAR(per_step->lrs[i], 0.1 * std::min(i / 4.0, 1.0), 1e-12) << i;
}

// k microbatches of b samples must give the step of one batch of k*b.
TEST(TrainerTest, MicrobatchesEqualOneLargeBatch) {
  Json config = test::smoke_config();
  config["max_steps"] = 4;
  config["model"] = Json::parse(R"({"name": "cnn", "channels": [4], "hidden": 8})");
  test::expect_microbatches_match_one_batch(config);
}

}  // namespace
}  // namespace basin
