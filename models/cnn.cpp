#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "basin/core/model/model.h"

namespace basin {
namespace {

/// A stage per entry of channels (a 3x3 convolution, a 2x2 max-pool, ReLU), then a hidden Linear and the classifier.
///     {"name": "cnn", "channels": [32, 64], "hidden": 128, "channels_last": true}
/// channels_last: the convolutions run on channels-last activations and a
/// channels-last copy of each weight, made in the forward (the parameters,
/// their gradients and everything that shards or saves them stay
/// contiguous). oneDNN's channels-last kernels took 0.71 of the contiguous
/// ones' time for this model's training step (batch 128, one thread, 1.13
/// and 2.11 alike); the values agree to float rounding.
class SmallCNN : public Model {
 public:
  SmallCNN(Params& params, const DatasetInfo& info) {
    if (info.input_shape.size() != 3) {
      throw ConfigError("model 'cnn' needs image inputs [C, H, W]; the dataset has " +
                        std::to_string(info.input_shape.size()) + " dimensions");
    }
    const auto channels = params.integers("channels", {32, 64});
    const int64_t hidden = params.integer("hidden", 128, 1);
    channels_last_ = params.boolean("channels_last", true);
    int64_t in = info.input_shape[0], h = info.input_shape[1], w = info.input_shape[2];
    for (std::size_t i = 0; i < channels.size(); ++i) {
      if (channels[i] < 1 || h < 2 || w < 2) {
        params.fail("channels", "positive widths, one per 2x pooling the input allows", params.raw("channels"));
      }
      convs_.push_back(register_module("conv" + std::to_string(i),
                                       torch::nn::Conv2d(torch::nn::Conv2dOptions(in, channels[i], 3).padding(kPadding))));
      in = channels[i];
      h /= 2;
      w /= 2;
    }
    fc_ = register_module("fc", torch::nn::Linear(in * h * w, hidden));
    out_ = register_module("out", torch::nn::Linear(hidden, info.num_classes));
    for (auto& conv : convs_) declare_unit(*conv);  // zero3 gathers one layer at a time
    declare_unit(*fc_);
    declare_unit(*out_);
  }

  at::Tensor forward(const at::Tensor& inputs) override {
    at::Tensor x = inputs;
    // Pooling before the ReLU: the same values and gradients (ReLU is monotone), on a quarter of the elements.
    for (auto& conv : convs_) {
      const at::Tensor y = unit(*conv, x, [this, conv](const at::Tensor& in) mutable { return convolve(*conv, in); });
      x = at::relu(at::max_pool2d(y, {2, 2}));
    }
    x = at::relu(unit(*fc_, x.flatten(1), [this](const at::Tensor& in) { return fc_->forward(in); }));
    return unit(*out_, x, [this](const at::Tensor& in) { return out_->forward(in); });
  }

 private:
  at::Tensor convolve(torch::nn::Conv2dImpl& conv, const at::Tensor& x) const {
    if (!channels_last_) return conv.forward(x);
    // Strided as channels-last even where a dimension of 1 would let contiguous() keep them (one input channel):
    // oneDNN picks its channels-last kernels from the weight's strides.
    const at::Tensor weight = at::empty_like(conv.weight, at::MemoryFormat::ChannelsLast).copy_(conv.weight);
    return at::conv2d(x, weight, conv.bias, /*stride=*/1, kPadding);
  }

  static constexpr int64_t kPadding = 1;  // the size-keeping 3x3 convolution, in both forwards
  bool channels_last_ = true;
  std::vector<torch::nn::Conv2d> convs_;
  torch::nn::Linear fc_{nullptr};
  torch::nn::Linear out_{nullptr};
};

BASIN_REGISTER(model_registry(), "cnn", SmallCNN);

}  // namespace
}  // namespace basin
