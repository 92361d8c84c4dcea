// SAM inside the engine and the trainer: wrapping on AFTER_SHARDING,
// BatchNorm statistics, gradient accumulation and config validation.

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam.h"
#include "basin/core/engine.h"
#include "basin/core/hyperparameters.h"
#include "basin/core/train/model.h"
#include "basin/core/train/trainer.h"
#include "test_util.h"

namespace basin {
namespace {

Json sam_config(const std::string& sam) {
  Json config = test::smoke_config();
  config["algorithms"] = Json::parse(R"({"sam": )" + sam + "}");
  return config;
}

TEST(SAMTrainingTest, WrapsOnceOnAfterShardingWithATrace) {
  Trainer trainer(sam_config("{}"));
  EXPECT_NE(dynamic_cast<SAMOptimizer*>(trainer.state().optimizer.get()), nullptr);
  trainer.engine().run(Event::AFTER_SHARDING);  // a second firing must not wrap again
  auto* sam = dynamic_cast<SAMOptimizer*>(trainer.state().optimizer.get());
  ASSERT_NE(sam, nullptr);
  EXPECT_EQ(dynamic_cast<SAMOptimizer*>(&sam->base()), nullptr);
  EXPECT_EQ(std::count(trainer.engine().trace().begin(), trainer.engine().trace().end(), "sam/after_sharding"), 1);
  const FitSummary summary = trainer.fit();
  EXPECT_EQ(sam->sam_steps(), summary.steps);
  EXPECT_GT(summary.test_accuracy, 0.4);
}

// A BatchNorm layer between two linear maps.
struct BnNet : torch::nn::Module {
  BnNet()
      : a(register_module("a", torch::nn::Linear(6, 8))),
        bn(register_module("bn", torch::nn::BatchNorm1d(8))),
        b(register_module("b", torch::nn::Linear(8, 3))) {}
  at::Tensor forward(const at::Tensor& x) { return b->forward(at::relu(bn->forward(a->forward(x)))); }
  torch::nn::Linear a;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear b;
};

// Runs one SAM step through the engine; returns the BatchNorm running stats after it.
std::vector<at::Tensor> stats_after_sam_step(bool freeze, const at::Tensor& x, const at::Tensor& y) {
  at::manual_seed(5);
  auto net = std::make_shared<BnNet>();
  State state;
  state.model = net;
  state.optimizer = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1));
  Engine engine(state);
  Params algorithms(Json::parse(std::string(R"({"sam": {"rho": 0.5, "freeze_running_stats": )") +
                                (freeze ? "true" : "false") + "}}"),
                    "algorithms");
  engine.add_algorithms(algorithms);
  engine.run(Event::AFTER_SHARDING);
  state.optimizer->step([&] {
    state.optimizer->zero_grad();
    at::Tensor loss = at::cross_entropy_loss(net->forward(x), y);
    loss.backward();
    return loss.detach();
  });
  return {net->bn->running_mean.clone(), net->bn->running_var.clone(), net->bn->num_batches_tracked.clone()};
}

TEST(SAMTrainingTest, DescentPassLeavesBatchNormStatisticsAsTheAscentLeftThem) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({32, 6});
  const at::Tensor y = at::randint(0, 3, {32}, at::kLong);

  // Reference: the same model after one training-mode forward (the ascent alone).
  at::manual_seed(5);
  BnNet reference;
  reference.forward(x);

  const auto frozen = stats_after_sam_step(true, x, y);
  EXPECT_TRUE(at::equal(frozen[0], reference.bn->running_mean));
  EXPECT_TRUE(at::equal(frozen[1], reference.bn->running_var));
  EXPECT_EQ(frozen[2].item<int64_t>(), 1);

  const auto counted_twice = stats_after_sam_step(false, x, y);
  EXPECT_EQ(counted_twice[2].item<int64_t>(), 2);
  EXPECT_FALSE(at::equal(counted_twice[0], reference.bn->running_mean));
}

TEST(SAMTrainingTest, MicrobatchesEqualOneLargeBatchUnderSam) {
  Json config = sam_config(R"({"rho": 0.1})");
  config["max_steps"] = 4;
  config["model"] = Json::parse(R"({"name": "cnn", "channels": [4], "hidden": 8})");
  test::expect_microbatches_match_one_batch(config);
}

TEST(SAMTrainingTest, PerGroupRhoFromConfig) {
  Json config = sam_config(R"({"rho": [0.05, 0.0]})");
  config["optimizer"]["param_groups"] = Json::parse(R"([{"params": "bias"}])");
  config["max_steps"] = 1;
  // Records the biases as the descent pass sees them: rho 0 must leave them at w.
  struct BiasWatcher : Callback {
    std::string name() const override { return "bias_watcher"; }
    bool on_before_forward(const State& state, Logger&) override {
      std::vector<at::Tensor> biases;
      for (const auto& item : state.model->named_parameters()) {
        if (item.key().find("bias") != std::string::npos) biases.push_back(item.value().detach().clone());
      }
      (state.pass == Pass::kAscent ? at_ascent : at_descent) = biases;
      return false;
    }
    std::vector<at::Tensor> at_ascent, at_descent;
  };
  auto watcher = std::make_shared<BiasWatcher>();
  Trainer trainer(config, {watcher});
  auto* sam = dynamic_cast<SAMOptimizer*>(trainer.state().optimizer.get());
  ASSERT_NE(sam, nullptr);
  EXPECT_DOUBLE_EQ(get_hyperparameter(sam->param_groups()[0].options(), "rho"), 0.05);
  EXPECT_DOUBLE_EQ(get_hyperparameter(sam->param_groups()[1].options(), "rho"), 0.0);
  trainer.fit();
  ASSERT_EQ(watcher->at_descent.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_TRUE(at::equal(watcher->at_ascent[i], watcher->at_descent[i]));
  EXPECT_EQ(test::trainer_config_error(sam_config(R"({"rho": [0.05, 0.1]})")).find("'algorithms.sam.rho'") != std::string::npos, true);
}

TEST(SAMTrainingTest, BadSamConfigsNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"rho": 0})", "'algorithms.sam.rho'"},
      {R"({"rho": -0.1})", "'algorithms.sam.rho'"},
      {R"({"interval": 0})", "'algorithms.sam.interval'"},
      {R"({"epsilon": -1})", "'algorithms.sam.epsilon'"},
      {R"({"adaptive": "yes"})", "'algorithms.sam.adaptive'"},
      {R"({"rhoo": 0.1})", "'algorithms.sam.rhoo' is not known"},
  };
  for (const auto& [sam, expected] : cases) {
    const std::string message = test::trainer_config_error(sam_config(sam));
    EXPECT_NE(message.find(expected), std::string::npos) << sam << ": " << message;
  }
}

TEST(SAMTrainingTest, SchedulerDrivesTheWrappedOptimizer) {
  Json config = sam_config(R"({"rho": 0.05})");
  config["schedulers"] = Json::parse(R"([{"name": "linear_warmup", "warmup": 4},
                                          {"name": "linear_warmup", "warmup": 2, "hyperparameter": "rho"}])");
  config["max_steps"] = 3;
  Trainer trainer(config);
  trainer.fit();
  auto* sam = dynamic_cast<SAMOptimizer*>(trainer.state().optimizer.get());
  ASSERT_NE(sam, nullptr);
  sam->sync_param_groups();
  EXPECT_DOUBLE_EQ(sam->base().param_groups()[0].options().get_lr(), 0.075);  // 3 of 4 warmup steps
  EXPECT_DOUBLE_EQ(get_hyperparameter(sam->param_groups()[0].options(), "rho"), 0.05);
}

}  // namespace
}  // namespace basin
