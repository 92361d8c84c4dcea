#pragma once

// The "gpt" model's parts (models/gpt.cpp builds and registers it; the
// Hugging Face GPT-2 layout is models/gpt_hugging_face.cpp). Not installed:
// the model is used by its registered name.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/model/model.h"
#include "basin/models/transformer_layers.h"

namespace basin::gpt {

/// What the config sizes: GPT-2's hyperparameters, by its names.
struct Shape {
  int64_t vocab_size, block_size, n_layer, n_head, n_embd;
  double dropout;
  bool bias;
};

constexpr double kInitStd = 0.02;
constexpr double kLayerNormEps = 1e-5;  // GPT-2's layer_norm_epsilon

/// LayerNorm over the last dimension, its bias optional (LibTorch 1.13's module has both or neither).
class LayerNorm : public torch::nn::Module {
 public:
  LayerNorm(int64_t width, bool bias) {
    weight = register_parameter("weight", at::ones({width}));
    if (bias) this->bias = register_parameter("bias", at::zeros({width}));
  }
  at::Tensor forward(const at::Tensor& x) const {
    return at::layer_norm(x, {weight.size(0)}, weight, bias, kLayerNormEps);
  }

  at::Tensor weight, bias;
};

using layers::Embedding;
using layers::Projection;

class CausalSelfAttention : public torch::nn::Module {
 public:
  explicit CausalSelfAttention(const Shape& shape) : heads_(shape.n_head), dropout_(shape.dropout) {
    c_attn = register_module("c_attn", std::make_shared<Projection>(shape.n_embd, 3 * shape.n_embd, shape.bias, kInitStd));
    c_proj = register_module("c_proj", std::make_shared<Projection>(shape.n_embd, shape.n_embd, shape.bias,
                                                                    kInitStd / std::sqrt(2.0 * shape.n_layer)));
  }

  at::Tensor forward(const at::Tensor& x) {
    const int64_t n = x.size(0), t = x.size(1), c = x.size(2);
    // [n, T, 3C] into q, k, v of [n, heads, T, C / heads].
    const auto qkv = c_attn->forward(x).view({n, t, 3, heads_, c / heads_}).permute({2, 0, 3, 1, 4}).unbind(0);
    const at::Tensor y = compat::causal_attention(qkv[0], qkv[1], qkv[2], is_training() ? dropout_ : 0.0);
    return at::dropout(c_proj->forward(y.transpose(1, 2).reshape({n, t, c})), dropout_, is_training());
  }

  std::shared_ptr<Projection> c_attn, c_proj;

 private:
  int64_t heads_;
  double dropout_;
};

class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const Shape& shape) : dropout_(shape.dropout) {
    c_fc = register_module("c_fc", std::make_shared<Projection>(shape.n_embd, 4 * shape.n_embd, shape.bias, kInitStd));
    c_proj = register_module("c_proj", std::make_shared<Projection>(4 * shape.n_embd, shape.n_embd, shape.bias,
                                                                    kInitStd / std::sqrt(2.0 * shape.n_layer)));
  }

  at::Tensor forward(const at::Tensor& x) {
    return at::dropout(c_proj->forward(at::gelu(c_fc->forward(x), "tanh")), dropout_, is_training());
  }

  std::shared_ptr<Projection> c_fc, c_proj;

 private:
  double dropout_;
};

/// x + attn(ln_1(x)), then + mlp(ln_2(.)).
class Block : public torch::nn::Module {
 public:
  explicit Block(const Shape& shape) {
    ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(shape.n_embd, shape.bias));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(shape));
    ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(shape.n_embd, shape.bias));
    mlp = register_module("mlp", std::make_shared<Mlp>(shape));
  }

  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = x + attn->forward(ln_1->forward(x));
    return h + mlp->forward(ln_2->forward(h));
  }

  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<Mlp> mlp;
};

/// GPT-2: embeddings, blocks, a final LayerNorm, the head tied to the token embedding.
class Gpt : public Model {
 public:
  Gpt(Params& params, const DatasetInfo& info);

  at::Tensor forward(const at::Tensor& ids) override;
  /// state_dict.pt, and `dir`/hf in Hugging Face's GPT-2 layout.
  void export_trained(const std::string& dir) override;
  /// A Hugging Face GPT-2 directory (config.json, model.safetensors).
  NamedTensors import_pretrained(const std::string& dir) override;
  std::string hugging_face_module(const std::string& name) const override { return "transformer." + name; }
  bool hugging_face_transposes_projections() const override { return true; }

  const Shape& shape() const { return shape_; }

 private:
  Shape shape_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
};

/// This model's parameters as Hugging Face's GPT2LMHeadModel names and lays
/// them out, and back: models/gpt_hugging_face.cpp.
void write_hugging_face(Gpt& model, const std::string& dir);
NamedTensors read_hugging_face(const Gpt& model, const std::string& dir);

}  // namespace basin::gpt
