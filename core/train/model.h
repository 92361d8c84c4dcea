#pragma once

#include <torch/nn/module.h>

#include "basin/core/registry.h"
#include "basin/core/train/dataset.h"

namespace basin {

/// A classifier the trainer can run: inputs [N, ...] to logits [N, classes].
/// torch::nn::Module has no virtual forward; this adds the one the loop calls.
class Model : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& inputs) = 0;
};

/// Models by name; a factory is given the dataset's input shape and classes.
Registry<Model, const DatasetInfo&>& model_registry();

}  // namespace basin
