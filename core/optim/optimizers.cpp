#include "basin/core/optim/optimizers.h"

#include <regex>
#include <unordered_set>

#include <torch/nn/module.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "basin/core/optim/fused_adam.h"
#include "basin/core/optim/hyperparameters.h"

namespace basin {

using torch::optim::OptimizerParamGroup;

OptimizerRegistry& optimizer_registry() {
  static OptimizerRegistry registry("optimizer");
  return registry;
}

namespace {

std::tuple<double, double> read_betas(Params& p) {
  const auto betas = p.numbers("betas", {0.9, 0.999});
  if (betas.size() != 2 || !(betas[0] >= 0 && betas[0] < 1) || !(betas[1] >= 0 && betas[1] < 1)) {
    p.fail("betas", "two numbers in [0, 1)", p.raw("betas"));
  }
  return {betas[0], betas[1]};
}

const bool registered = [] {
  auto& r = optimizer_registry();
  r.add("sgd", [](Params& p, std::vector<OptimizerParamGroup> groups) -> std::shared_ptr<torch::optim::Optimizer> {
    torch::optim::SGDOptions o(p.number("lr", 0.1, 0));
    o.momentum(p.number("momentum", 0, 0)).dampening(p.number("dampening", 0, 0));
    o.weight_decay(p.number("weight_decay", 0, 0)).nesterov(p.boolean("nesterov", false));
    return std::make_shared<torch::optim::SGD>(std::move(groups), o);
  });
  r.add("adam", [](Params& p, std::vector<OptimizerParamGroup> groups) -> std::shared_ptr<torch::optim::Optimizer> {
    torch::optim::AdamOptions o(p.number("lr", 1e-3, 0));
    o.betas(read_betas(p)).eps(p.positive("eps", 1e-8)).weight_decay(p.number("weight_decay", 0, 0));
    o.amsgrad(p.boolean("amsgrad", false));
    if (!p.boolean("fused", true)) return std::make_shared<torch::optim::Adam>(std::move(groups), o);
    return std::make_shared<FusedAdam>(std::move(groups), o);
  });
  r.add("adamw", [](Params& p, std::vector<OptimizerParamGroup> groups) -> std::shared_ptr<torch::optim::Optimizer> {
    torch::optim::AdamWOptions o(p.number("lr", 1e-3, 0));
    o.betas(read_betas(p)).eps(p.positive("eps", 1e-8)).weight_decay(p.number("weight_decay", 1e-2, 0));
    o.amsgrad(p.boolean("amsgrad", false));
    if (!p.boolean("fused", true)) return std::make_shared<torch::optim::AdamW>(std::move(groups), o);
    return std::make_shared<FusedAdamW>(std::move(groups), o);
  });
  r.add("rmsprop", [](Params& p, std::vector<OptimizerParamGroup> groups) -> std::shared_ptr<torch::optim::Optimizer> {
    torch::optim::RMSpropOptions o(p.number("lr", 1e-2, 0));
    o.alpha(p.number("alpha", 0.99, 0, 1)).eps(p.positive("eps", 1e-8));
    o.weight_decay(p.number("weight_decay", 0, 0)).momentum(p.number("momentum", 0, 0));
    o.centered(p.boolean("centered", false));
    return std::make_shared<torch::optim::RMSprop>(std::move(groups), o);
  });
  r.add("adagrad", [](Params& p, std::vector<OptimizerParamGroup> groups) -> std::shared_ptr<torch::optim::Optimizer> {
    torch::optim::AdagradOptions o(p.number("lr", 1e-2, 0));
    o.lr_decay(p.number("lr_decay", 0, 0)).weight_decay(p.number("weight_decay", 0, 0));
    o.initial_accumulator_value(p.number("initial_accumulator_value", 0, 0)).eps(p.positive("eps", 1e-10));
    return std::make_shared<torch::optim::Adagrad>(std::move(groups), o);
  });
  return true;
}();

struct GroupSpec {
  Params params;
  std::vector<at::Tensor> tensors;
};

}  // namespace

std::shared_ptr<torch::optim::Optimizer> make_optimizer(Params& config, const torch::nn::Module& model) {
  (void)registered;
  const std::string name = config.string("name");
  const Json group_configs = config.array("param_groups");

  std::vector<GroupSpec> specs;
  std::vector<at::Tensor> rest;
  std::vector<std::regex> patterns;
  for (std::size_t i = 0; i < group_configs.size(); ++i) {
    Params spec(group_configs[i], config.path_of("param_groups[" + std::to_string(i) + "]"));
    const std::string pattern = spec.string("params");
    try {
      patterns.emplace_back(pattern);
    } catch (const std::regex_error&) {
      spec.fail("params", "a regular expression over parameter names", Json(pattern));
    }
    specs.push_back({std::move(spec), {}});
  }
  std::string all_names;
  std::unordered_set<const c10::TensorImpl*> seen;  // a tied weight appears under each of its names
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad() || !seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
    all_names += (all_names.empty() ? "" : ", ") + item.key();
    bool taken = false;
    for (std::size_t i = 0; i < specs.size() && !taken; ++i) {
      if (std::regex_search(item.key(), patterns[i])) {
        specs[i].tensors.push_back(item.value());
        taken = true;
      }
    }
    if (!taken) rest.push_back(item.value());
  }

  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(rest);
  for (auto& spec : specs) {
    if (spec.tensors.empty()) {
      spec.params.fail("params", "a pattern matching some parameter (" + all_names + ")", spec.params.raw("params"));
    }
    groups.emplace_back(spec.tensors);
  }
  auto optimizer = optimizer_registry().create(name, config, std::move(groups));

  // Group overrides go through the shared hyper-parameter names, so every
  // optimizer's groups accept exactly the settings it has.
  for (std::size_t i = 0; i < specs.size(); ++i) {
    Params& spec = specs[i].params;
    auto& options = optimizer->param_groups()[i + 1].options();
    for (const std::string& key : spec.keys()) {
      if (key == "params") continue;
      if (!has_hyperparameter(options, key)) {
        std::string names;
        for (const auto& n : hyperparameter_names(options)) names += (names.empty() ? "" : ", ") + n;
        throw ConfigError("config key '" + spec.path_of(key) + "' is not a hyper-parameter of optimizer '" +
                          name + "'; it has: " + names);
      }
      set_hyperparameter(options, key, spec.number(key, 0, 0));
    }
    spec.finish();
  }
  return optimizer;
}

}  // namespace basin
