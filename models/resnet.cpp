#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "basin/core/model/model.h"

namespace basin {
namespace {

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

/// conv-BN-ReLU-conv-BN plus the shortcut (1x1 conv + BN when the shape changes).
class BasicBlock : public torch::nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride)
      : conv1_(register_module("conv1", conv3x3(in, out, stride))),
        bn1_(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2_(register_module("conv2", conv3x3(out, out, 1))),
        bn2_(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut_conv_ = register_module(
          "shortcut_conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
      shortcut_bn_ = register_module("shortcut_bn", torch::nn::BatchNorm2d(out));
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = at::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    const at::Tensor shortcut = shortcut_conv_ ? shortcut_bn_->forward(shortcut_conv_->forward(x)) : x;
    return at::relu(y + shortcut);
  }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
  torch::nn::Conv2d conv2_;
  torch::nn::BatchNorm2d bn2_;
  torch::nn::Conv2d shortcut_conv_{nullptr};
  torch::nn::BatchNorm2d shortcut_bn_{nullptr};
};

/// A small ResNet with BatchNorm: a 3x3 stem, then stages of basic blocks,
/// each stage after the first halving the resolution and doubling the width.
///     {"name": "resnet", "width": 16, "blocks": [1, 1, 1]}
class SmallResNet : public Model {
 public:
  SmallResNet(Params& params, const DatasetInfo& info) {
    if (info.input_shape.size() != 3) {
      throw ConfigError("model 'resnet' needs image inputs [C, H, W]; the dataset has " +
                        std::to_string(info.input_shape.size()) + " dimensions");
    }
    const int64_t width = params.integer("width", 16, 1);
    const auto blocks = params.integers("blocks", {1, 1, 1});
    if (blocks.empty()) params.fail("blocks", "a non-empty array of block counts", params.raw("blocks"));
    stem_ = register_module("stem", conv3x3(info.input_shape[0], width, 1));
    stem_bn_ = register_module("stem_bn", torch::nn::BatchNorm2d(width));
    int64_t in = width;
    for (std::size_t stage = 0; stage < blocks.size(); ++stage) {
      if (blocks[stage] < 1) params.fail("blocks", "block counts >= 1", params.raw("blocks"));
      const int64_t out = width << stage;
      for (int64_t b = 0; b < blocks[stage]; ++b) {
        const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        blocks_.push_back(register_module("stage" + std::to_string(stage) + "_block" + std::to_string(b),
                                          std::make_shared<BasicBlock>(in, out, stride)));
        in = out;
      }
    }
    fc_ = register_module("fc", torch::nn::Linear(in, info.num_classes));
    // zero3 gathers the stem, each block and the classifier one at a time;
    // the stem's BatchNorm belongs to no unit (the root, whole for the step).
    declare_unit(*stem_);
    for (auto& block : blocks_) declare_unit(*block);
    declare_unit(*fc_);
  }

  at::Tensor forward(const at::Tensor& inputs) override {
    at::Tensor x = unit(*stem_, inputs, [this](const at::Tensor& in) { return stem_->forward(in); });
    x = at::relu(stem_bn_->forward(x));
    for (auto& block : blocks_) x = unit(*block, x, [block](const at::Tensor& in) { return block->forward(in); });
    x = at::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return unit(*fc_, x, [this](const at::Tensor& in) { return fc_->forward(in); });
  }

 private:
  torch::nn::Conv2d stem_{nullptr};
  torch::nn::BatchNorm2d stem_bn_{nullptr};
  std::vector<std::shared_ptr<BasicBlock>> blocks_;
  torch::nn::Linear fc_{nullptr};
};

BASIN_REGISTER(model_registry(), "resnet", SmallResNet);

}  // namespace
}  // namespace basin
