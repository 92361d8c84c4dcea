// SAM inside the engine and the trainer: wrapping on AFTER_SHARDING,
// BatchNorm statistics, gradient accumulation and config validation.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/sam.h"
#include "basin/core/engine/engine.h"
#include "basin/core/model/model.h"
#include "basin/core/optim/hyperparameters.h"
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
  EXPECT_EQ(trainer.engine().applications("sam/after_sharding"), 1);
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

// A step takes one SAM-family algorithm: a second one used to be left out without a word while its keys passed
// validation (and the run differed from either alone). Refused, naming both, whichever comes first.
TEST(SAMTrainingTest, TwoSamFamilyAlgorithmsAreRefusedNamingBoth) {
  for (const char* algorithms : {R"({"sam": {}, "gsam": {}})", R"({"looksam": {}, "momentum_sam": {}})"}) {
    Json config = test::smoke_config();
    config["algorithms"] = Json::parse(algorithms);
    const std::string message = test::trainer_config_error(config);
    for (const auto& [name, keys] : config["algorithms"].items()) {
      EXPECT_NE(message.find("'algorithms." + name + "'"), std::string::npos) << algorithms << ": " << message;
    }
    EXPECT_NE(message.find("one SAM-family algorithm"), std::string::npos) << message;
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

namespace basin {
namespace {

Json variant_config(const std::string& name, const std::string& keys) {
  Json config = test::smoke_config();
  config["algorithms"] = Json::object();
  config["algorithms"][name] = Json::parse(keys);
  return config;
}

class VariantTrainingTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(VariantTrainingTest, TrainsTheSyntheticRun) {
  auto losses = std::make_shared<test::LossRecorder>();
  Trainer trainer(variant_config(GetParam().first, GetParam().second), {losses});
  const FitSummary summary = trainer.fit();
  auto* sam = dynamic_cast<SAMOptimizer*>(trainer.state().optimizer.get());
  ASSERT_NE(sam, nullptr);
  EXPECT_EQ(sam->steps(), summary.steps);
  EXPECT_GT(sam->sam_steps(), 0);  // all of them, but LookSAM's reuse steps and AE-SAM's plain ones
  ASSERT_EQ(losses->losses.size(), 16u);
  const auto mean = [](auto begin, auto end) { return std::accumulate(begin, end, 0.0) / std::distance(begin, end); };
  EXPECT_LT(mean(losses->losses.end() - 4, losses->losses.end()), mean(losses->losses.begin(), losses->losses.begin() + 4));
  EXPECT_GT(summary.test_accuracy, 0.4);
}

TEST_P(VariantTrainingTest, TrainsOnFashionMnist) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  }
  Json config = variant_config(GetParam().first, GetParam().second);
  config["data"] = Json::parse(R"({"name": "fashion_mnist", "batch_size": 64, "train_subset": 1024})");
  config["model"] = Json::parse(R"({"name": "mlp", "hidden": [32]})");
  config["max_epochs"] = 1;
  auto losses = std::make_shared<test::LossRecorder>();
  Trainer trainer(config, {losses});
  const FitSummary summary = trainer.fit();
  ASSERT_EQ(losses->losses.size(), 16u);
  const auto mean = [](auto begin, auto end) { return std::accumulate(begin, end, 0.0) / std::distance(begin, end); };
  EXPECT_LT(mean(losses->losses.end() - 4, losses->losses.end()), mean(losses->losses.begin(), losses->losses.begin() + 4));
  EXPECT_GT(summary.test_accuracy, 0.5);  // ten classes: chance is 0.1
}

TEST_P(VariantTrainingTest, MicrobatchesEqualOneLargeBatch) {
  test::expect_microbatches_match_one_batch(variant_config(GetParam().first, GetParam().second));
}

TEST_P(VariantTrainingTest, TrainsUnderBf16AndSkipsOverflowedStepsUnderTheGradScaler) {
  Json bf16 = variant_config(GetParam().first, GetParam().second);
  bf16["precision"] = "amp_bf16";
  const FitSummary mixed = Trainer(bf16).fit();
  EXPECT_TRUE(std::isfinite(mixed.final_train_loss));
  EXPECT_GT(mixed.test_accuracy, 0.4);

  test::expect_overflowed_steps_skipped(variant_config(GetParam().first, GetParam().second));
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantTrainingTest, ::testing::ValuesIn(test::sam_family()),
                         [](const auto& info) { return info.param.first; });

std::vector<at::Tensor> trained_weights(const Json& config) {
  Trainer trainer(config);
  trainer.fit();
  std::vector<at::Tensor> weights;
  for (const auto& p : trainer.model().parameters()) weights.push_back(p.detach().clone());
  return weights;
}

void expect_same_weights(const Json& a, const Json& b, const std::string& what) {
  const auto wa = trained_weights(a), wb = trained_weights(b);
  ASSERT_EQ(wa.size(), wb.size());
  for (std::size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(at::equal(wa[i], wb[i])) << what << " parameter " << i;
}

TEST(SAMVariantsTrainingTest, PerturbMatchingEveryNameAndMsamOfOnePartAreSam) {
  expect_same_weights(variant_config("sam", R"({"perturb": "."})"), variant_config("sam", "{}"), "perturb .");
  expect_same_weights(variant_config("msam", R"({"m": 1})"), variant_config("sam", "{}"), "msam m 1");
  expect_same_weights(variant_config("gsam", R"({"alpha": 0})"), variant_config("sam", "{}"), "gsam alpha 0");
}

TEST(SAMVariantsTrainingTest, SamOnPerturbsTheNormalizationLayersAlone) {
  Json config = variant_config("sam", R"({"perturb": "bn"})");
  config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
  config["max_steps"] = 2;
  Trainer trainer(config);
  trainer.fit();
  auto& sam = dynamic_cast<SAMOptimizer&>(*trainer.state().optimizer);
  int64_t bn_numel = 0, all_numel = 0;
  for (const auto& item : trainer.model().named_parameters()) {
    all_numel += item.value().numel();
    if (item.key().find("bn") != std::string::npos) bn_numel += item.value().numel();
  }
  int64_t buffered = 0;
  for (const auto& b : sam.perturbed_buffers()) buffered += b.numel();
  EXPECT_GT(bn_numel, 0);
  EXPECT_LT(bn_numel, all_numel);
  EXPECT_EQ(buffered, bn_numel);  // only they were moved to w + e
}

TEST(SAMVariantsTrainingTest, AsamScalesTheParametersNamedWeightAsItsAuthorsDo) {
  for (const std::string scale : {"weights", "all"}) {
    Json config = variant_config("asam", R"({"scale": ")" + scale + R"("})");
    config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
    Trainer trainer(config);
    auto& sam = dynamic_cast<SAM&>(dynamic_cast<SAMOptimizer&>(*trainer.state().optimizer).rule());
    int64_t scaled = 0;
    for (const auto& item : trainer.model().named_parameters()) {
      const bool weight = item.key().find("weight") != std::string::npos;
      EXPECT_EQ(sam.scales(item.value()), scale == "all" || weight) << scale << " " << item.key();
      scaled += sam.scales(item.value()) ? 1 : 0;
    }
    EXPECT_GT(scaled, 0);
  }
}

TEST(SAMVariantsTrainingTest, StartAsAFractionOfTheRunLeavesTheFirstPartPlain) {
  Trainer trainer(variant_config("sam", R"({"start": 0.75})"));  // 16 steps: SAM from step 12
  const FitSummary summary = trainer.fit();
  auto& sam = dynamic_cast<SAMOptimizer&>(*trainer.state().optimizer);
  EXPECT_EQ(summary.steps, 16);
  EXPECT_EQ(sam.sam_steps(), 4);
  // A max_steps beyond the epochs does not lengthen the run the fraction is of.
  Json capped = variant_config("sam", R"({"start": 0.5})");
  capped["max_steps"] = 1000;
  Trainer half(capped);
  EXPECT_EQ(half.fit().steps, 16);
  EXPECT_EQ(dynamic_cast<SAMOptimizer&>(*half.state().optimizer).sam_steps(), 8);
  Json long_run = variant_config("ae_sam", "{}");
  long_run["max_epochs"] = 8;  // mean and variance start at 0: the policy needs some steps to settle
  Trainer ae(long_run);
  const FitSummary adaptive = ae.fit();
  const auto& policy = dynamic_cast<SAMOptimizer&>(*ae.state().optimizer);
  EXPECT_GT(policy.sam_steps(), 0);
  EXPECT_LT(policy.sam_steps(), adaptive.steps);  // some steps plain: that is the point
}

TEST(SAMVariantsTrainingTest, BadVariantConfigsNameTheKey) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"gsam", R"({"alpha": -1})", "'algorithms.gsam.alpha'"},
      {"wsam", R"({"gamma": 1})", "'algorithms.wsam.gamma'"},
      {"friendly_sam", R"({"lambda": 2})", "'algorithms.friendly_sam.lambda'"},
      {"vasso", R"({"theta": 0})", "'algorithms.vasso.theta'"},
      {"msam", R"({"m": 0})", "'algorithms.msam.m'"},
      {"asam", R"({"scale": "biases"})", "'algorithms.asam.scale'"},
      {"asam", R"({"adaptive": false})", "'algorithms.asam.adaptive'"},
      {"fisher_sam", R"({"adaptive": true})", "'algorithms.fisher_sam.adaptive'"},
      {"sam", R"({"perturb": "(bn"})", "'algorithms.sam.perturb'"},
      {"vasso", R"({"perturb": "no_such_layer"})", "'algorithms.vasso.perturb': \"no_such_layer\" matches no parameter name; the model has fc0.weight"},
      {"msam", R"({"m": 3})", "must split into 3 parts"},
      {"sam", R"({"start": -1})", "'algorithms.sam.start'"},
      {"sam", R"({"start": 1.5})", "'algorithms.sam.start'"},
      {"looksam", R"({"k": 0})", "'algorithms.looksam.k'"},
      {"ae_sam", R"({"delta": 1})", "'algorithms.ae_sam.delta'"},
      {"momentum_sam", R"({"adaptive": true})", "'algorithms.momentum_sam.adaptive'"},
      {"esam", R"({"beta": 0})", "'algorithms.esam.beta'"},
      {"esam", R"({"gamma": 1.5})", "'algorithms.esam.gamma'"},
  };
  for (const auto& [name, keys, expected] : cases) {
    const Json config = variant_config(name, keys);
    const std::string message = test::config_error_of([&config] { Trainer(config).fit(); });
    EXPECT_NE(message.find(expected), std::string::npos) << name << " " << keys << ": " << message;
  }
}

TEST(SAMVariantsTrainingTest, MomentumSamNamesAnOptimizerWithoutMomentum) {
  Json config = variant_config("momentum_sam", "{}");
  config["optimizer"]["momentum"] = 0;
  const std::string message = test::config_error_of([&config] { Trainer(config).fit(); });
  EXPECT_NE(message.find("config key 'optimizer': momentum_sam perturbs along the optimizer's momentum, but param "
                         "group 0 has momentum 0"),
            std::string::npos)
      << message;
}

TEST(SAMVariantsTrainingTest, RhoFollowsTheLrWithAMinimumAsGsamDoes) {
  Json config = variant_config("gsam", R"({"rho": 0.04})");
  config["schedulers"] = Json::parse(R"([{"name": "cosine_warmup", "warmup": 0},
      {"name": "cosine_warmup", "warmup": 0, "hyperparameter": "rho", "minimum": 0.02}])");
  config["max_steps"] = 5;
  Trainer trainer(config);
  trainer.fit();
  for (const auto& group : trainer.state().optimizer->param_groups()) {
    const double lr = get_hyperparameter(group.options(), "lr"), rho = get_hyperparameter(group.options(), "rho");
    // GSAM's rule with lr_min = 0: rho = rho_min + (rho_max - rho_min) * lr / lr_max.
    EXPECT_NEAR(rho, 0.02 + (0.04 - 0.02) * lr / 0.1, 1e-12);
    EXPECT_LT(lr, 0.1);
  }
}

}  // namespace
}  // namespace basin
