#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "basin/core/model/model.h"

namespace basin {
namespace {

/// Flatten, then Linear+ReLU per hidden width, then a Linear to the classes.
///     {"name": "mlp", "hidden": [256, 128]}
class MLP : public Model {
 public:
  MLP(Params& params, const DatasetInfo& info) {
    int64_t width = 1;
    for (int64_t d : info.input_shape) width *= d;
    const auto hidden = params.integers("hidden", {256, 128});
    for (std::size_t i = 0; i < hidden.size(); ++i) {
      if (hidden[i] < 1) params.fail("hidden", "positive widths", params.raw("hidden"));
      layers_.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(width, hidden[i])));
      width = hidden[i];
    }
    layers_.push_back(register_module("out", torch::nn::Linear(width, info.num_classes)));
    for (auto& layer : layers_) declare_unit(*layer);  // zero3 gathers one layer at a time
  }

  at::Tensor forward(const at::Tensor& inputs) override {
    at::Tensor x = inputs.flatten(1);
    for (std::size_t i = 0; i + 1 < layers_.size(); ++i) x = at::relu(layer(i, x));
    return layer(layers_.size() - 1, x);
  }

 private:
  at::Tensor layer(std::size_t i, const at::Tensor& x) {
    return unit(*layers_[i], x, [layer = layers_[i]](const at::Tensor& in) mutable { return layer->forward(in); });
  }

  std::vector<torch::nn::Linear> layers_;
};

BASIN_REGISTER(model_registry(), "mlp", MLP);

}  // namespace
}  // namespace basin
