#pragma once

#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

#include "basin/core/config/registry.h"

namespace torch::nn { class Module; }

namespace basin {

/// Optimizers by name: sgd, adam, adamw, rmsprop, adagrad (LibTorch's own).
/// A factory reads its options and builds the optimizer over the given groups,
/// whose options are left empty so that they take the defaults.
using OptimizerRegistry = Registry<torch::optim::Optimizer, std::vector<torch::optim::OptimizerParamGroup>>;
OptimizerRegistry& optimizer_registry();

/// Builds the optimizer that `config` describes over `model`'s trainable parameters:
///
///     {"name": "sgd", "lr": 0.1, "momentum": 0.9,
///      "param_groups": [{"params": "bias|bn", "weight_decay": 0}]}
///
/// Each "param_groups" entry takes the parameters whose names match its regex
/// (and no earlier entry's) and overrides hyper-parameters for them. The
/// parameters no entry takes form group 0, so group 0 carries the top-level
/// settings.
std::shared_ptr<torch::optim::Optimizer> make_optimizer(Params& config, const torch::nn::Module& model);

}  // namespace basin
