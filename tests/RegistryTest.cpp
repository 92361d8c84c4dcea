#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "basin/core/data/dataset.h"
#include "basin/core/engine/algorithm.h"
#include "basin/core/engine/callback.h"
#include "basin/core/model/model.h"
#include "basin/core/optim/hyperparameters.h"
#include "basin/core/optim/optimizers.h"
#include "basin/core/optim/scheduler.h"
#include "test_util.h"

namespace basin {
namespace {

class Shape : public Model {
 public:
  Shape(Params& params, const DatasetInfo& info) : scale(params.number("scale", 1.0)), classes(info.num_classes) {}
  at::Tensor forward(const at::Tensor& x) override { return x * scale; }
  double scale;
  int64_t classes;
};

TEST(RegistryTest, CreatesByNameAndPassesArguments) {
  Registry<Model, const DatasetInfo&> registry("model");
  registry.add_type<Shape>("shape");
  Params params(Json::parse(R"({"scale": 2.5})"), "model");
  auto model = registry.create("shape", params, DatasetInfo{{1}, 7});
  auto* shape = dynamic_cast<Shape*>(model.get());
  ASSERT_NE(shape, nullptr);
  EXPECT_EQ(shape->scale, 2.5);
  EXPECT_EQ(shape->classes, 7);
}

TEST(RegistryTest, UnknownNameListsKnownNames) {
  Params params(Json::object(), "model");
  const std::string message = test::config_error_of([&] { model_registry().create("transformer", params, DatasetInfo{{1, 8, 8}, 2}); });
  EXPECT_NE(message.find("'transformer'"), std::string::npos) << message;
  for (const char* known : {"mlp", "cnn", "resnet"}) EXPECT_NE(message.find(known), std::string::npos) << message;
}

TEST(RegistryTest, UnknownKeyOfACreatedObjectIsAnError) {
  Params params(Json::parse(R"({"hidden": [4], "hiden": [4]})"), "model");
  const std::string message = test::config_error_of([&] { model_registry().create("mlp", params, DatasetInfo{{4}, 2}); });
  EXPECT_NE(message.find("'model.hiden'"), std::string::npos) << message;
}

TEST(RegistryTest, DuplicateRegistrationIsRejected) {
  Registry<Model, const DatasetInfo&> registry("model");
  registry.add_type<Shape>("shape");
  EXPECT_THROW(registry.add_type<Shape>("shape"), std::logic_error);
}

TEST(RegistryTest, EveryKindHasItsBuiltins) {
  const auto has = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const char* name : {"sgd", "adam", "adamw", "rmsprop", "adagrad"}) EXPECT_TRUE(has(optimizer_registry().names(), name));
  for (const char* name : {"mlp", "cnn", "resnet"}) EXPECT_TRUE(has(model_registry().names(), name));
  for (const char* name : {"synthetic", "fashion_mnist"}) EXPECT_TRUE(has(dataset_registry().names(), name));
  for (const char* name : {"constant", "step", "multistep", "exponential", "linear_warmup", "cosine_warmup",
                           "polynomial", "sequential"}) {
    EXPECT_TRUE(has(schedule_registry().names(), name)) << name;
  }
  EXPECT_TRUE(has(callback_registry().names(), "progress"));
}

// A two-layer module whose parameter names the group patterns can select.
struct TwoLayers : torch::nn::Module {
  TwoLayers() {
    register_module("first", torch::nn::Linear(2, 2));
    register_module("second", torch::nn::Linear(torch::nn::LinearOptions(2, 2).bias(false)));
  }
};

TEST(OptimizerFactoryTest, BuildsEachLibTorchOptimizerWithItsOptions) {
  TwoLayers model;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"sgd", R"({"name": "sgd", "lr": 0.3, "momentum": 0.9, "nesterov": true})"},
      {"adam", R"({"name": "adam", "lr": 0.3, "betas": [0.8, 0.9]})"},
      {"adamw", R"({"name": "adamw", "lr": 0.3, "weight_decay": 0.1})"},
      {"rmsprop", R"({"name": "rmsprop", "lr": 0.3, "alpha": 0.9})"},
      {"adagrad", R"({"name": "adagrad", "lr": 0.3, "lr_decay": 0.01})"}};
  for (const auto& [name, text] : cases) {
    Params params(Json::parse(text), "optimizer");
    auto optimizer = make_optimizer(params, model);
    ASSERT_EQ(optimizer->param_groups().size(), 1u) << name;
    EXPECT_EQ(optimizer->param_groups()[0].params().size(), 3u) << name;
    EXPECT_DOUBLE_EQ(optimizer->param_groups()[0].options().get_lr(), 0.3) << name;
  }
  Params adam(Json::parse(R"({"name": "adam", "betas": [0.8, 0.9]})"), "optimizer");
  auto optimizer = make_optimizer(adam, model);
  EXPECT_DOUBLE_EQ(get_hyperparameter(optimizer->param_groups()[0].options(), "beta1"), 0.8);
  EXPECT_DOUBLE_EQ(get_hyperparameter(optimizer->param_groups()[0].options(), "beta2"), 0.9);
}

TEST(OptimizerFactoryTest, ParamGroupsSplitByPatternAndOverrideHyperparameters) {
  TwoLayers model;
  Params params(Json::parse(R"({"name": "sgd", "lr": 0.1, "weight_decay": 0.01,
      "param_groups": [{"params": "bias", "weight_decay": 0}, {"params": "^second", "lr": 0.5}]})"),
                "optimizer");
  auto optimizer = make_optimizer(params, model);
  const auto& groups = optimizer->param_groups();
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].params().size(), 1u);  // first.weight: no pattern took it
  EXPECT_EQ(groups[1].params().size(), 1u);  // first.bias
  EXPECT_EQ(groups[2].params().size(), 1u);  // second.weight
  EXPECT_DOUBLE_EQ(get_hyperparameter(groups[0].options(), "weight_decay"), 0.01);
  EXPECT_DOUBLE_EQ(get_hyperparameter(groups[1].options(), "weight_decay"), 0.0);
  EXPECT_DOUBLE_EQ(get_hyperparameter(groups[1].options(), "lr"), 0.1);
  EXPECT_DOUBLE_EQ(get_hyperparameter(groups[2].options(), "lr"), 0.5);
}

TEST(OptimizerFactoryTest, BadGroupsAndValuesNameTheKey) {
  TwoLayers model;
  auto error_for = [&](const std::string& text) {
    return test::config_error_of([&] {
      Params params(Json::parse(text), "optimizer");
      make_optimizer(params, model);
    });
  };
  std::string message = error_for(R"({"name": "adam", "param_groups": [{"params": "bias", "momentum": 0.9}]})");
  EXPECT_NE(message.find("'optimizer.param_groups[0].momentum'"), std::string::npos) << message;
  EXPECT_NE(message.find("beta1"), std::string::npos) << message;
  message = error_for(R"({"name": "sgd", "param_groups": [{"params": "nothing_matches"}]})");
  EXPECT_NE(message.find("'optimizer.param_groups[0].params'"), std::string::npos) << message;
  message = error_for(R"({"name": "sgd", "lr": -0.1})");
  EXPECT_NE(message.find("'optimizer.lr'"), std::string::npos) << message;
  message = error_for(R"({"name": "lion"})");
  EXPECT_NE(message.find("adamw"), std::string::npos) << message;
  message = error_for(R"({"name": "sgd", "momentun": 0.9})");
  EXPECT_NE(message.find("'optimizer.momentun' is not known"), std::string::npos) << message;
}

TEST(HyperparameterTest, ReadsAndWritesEveryOptimizersNumbers) {
  torch::optim::SGDOptions sgd(0.1);
  set_hyperparameter(sgd, "momentum", 0.8);
  EXPECT_DOUBLE_EQ(sgd.momentum(), 0.8);
  torch::optim::AdamOptions adam(0.1);
  set_hyperparameter(adam, "beta2", 0.95);
  EXPECT_DOUBLE_EQ(std::get<1>(adam.betas()), 0.95);
  EXPECT_DOUBLE_EQ(std::get<0>(adam.betas()), 0.9);
  torch::optim::RMSpropOptions rmsprop(0.1);
  set_hyperparameter(rmsprop, "alpha", 0.5);
  EXPECT_DOUBLE_EQ(get_hyperparameter(rmsprop, "alpha"), 0.5);
  torch::optim::AdagradOptions adagrad(0.1);
  EXPECT_DOUBLE_EQ(get_hyperparameter(adagrad, "lr"), 0.1);
  torch::optim::AdamWOptions adamw(0.1);
  EXPECT_THROW(set_hyperparameter(adamw, "momentum", 0.9), std::invalid_argument);
  HyperparameterMap map({{"lr", 0.2}, {"rho", 0.05}});
  EXPECT_DOUBLE_EQ(get_hyperparameter(map, "rho"), 0.05);
  map.set_lr(0.3);
  EXPECT_DOUBLE_EQ(get_hyperparameter(map, "lr"), 0.3);
}

}  // namespace
}  // namespace basin
