#pragma once

// The "llama" model's parts (models/llama.cpp builds and registers it; the
// Hugging Face Llama layout is models/llama_hugging_face.cpp). Not
// installed: the model is used by its registered name.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "basin/core/config/json.h"
#include "basin/core/model/model.h"
#include "basin/models/transformer_layers.h"

namespace basin::llama {

/// The checkpoints made of Llama's layer, told apart by their biases: Llama
/// (attention_bias on q, k, v and o; mlp_bias), Qwen2 (a bias on q, k and v
/// alone) and Mistral (none).
enum class Family { kLlama, kQwen2, kMistral };

/// The model's registered name ("llama", "qwen2", "mistral"), which is also
/// config.json's model_type, and Hugging Face's class for it.
const char* name_of(Family family);
const char* architecture_of(Family family);

/// Whether attention limited to the last `window` positions (null: none)
/// differs from causal attention over `positions`: basin's sees them all.
bool window_slides(const Json& window, int64_t positions);

/// What the config sizes, by the names of Hugging Face's configs.
struct Shape {
  Family family;
  int64_t vocab_size, max_position_embeddings, hidden_size, intermediate_size, num_hidden_layers,
      num_attention_heads, num_key_value_heads, head_dim;
  double rms_norm_eps, rope_theta, attention_dropout, initializer_range;
  bool qkv_bias, o_bias, mlp_bias, tie_word_embeddings;
  Json sliding_window;  // Mistral's, null or one that never slides (written back as given)
};

/// x / sqrt(mean(x^2) + eps) * weight over the last dimension, computed in
/// fp32 and cast back before the weight, as Llama's RMSNorm does.
class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(int64_t width, double eps) : eps_(eps) { weight = register_parameter("weight", at::ones({width})); }
  at::Tensor forward(const at::Tensor& x) const {
    const at::Tensor wide = x.to(at::kFloat);
    const at::Tensor normed = wide * at::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return weight * normed.to(x.scalar_type());
  }

  at::Tensor weight;

 private:
  double eps_;
};

/// Rotary position embeddings (Su et al., 2021) as Llama applies them: the
/// cosines and sines of positions 0..T-1 at frequencies theta^(-2i/d), each
/// repeated for both halves of a head, [T, head_dim].
struct Rotary {
  at::Tensor cos, sin;
  /// The tables computed in fp32, then cast to `options`' dtype: the residual
  /// stream's, as Llama casts them (fp32 under autocast, where the rotation
  /// of bf16 queries and keys is then done in fp32 too).
  static Rotary of(int64_t positions, int64_t head_dim, double theta, const at::TensorOptions& options);
  /// x [n, heads, T, head_dim] rotated: x cos + rotate_half(x) sin, in the wider of the two dtypes.
  at::Tensor apply(const at::Tensor& x) const;
};

/// Causal self-attention with grouped-query heads: num_key_value_heads key
/// and value heads, each shared by num_attention_heads / num_key_value_heads
/// query heads; queries and keys rotated by position.
class Attention : public torch::nn::Module {
 public:
  explicit Attention(const Shape& shape);
  at::Tensor forward(const at::Tensor& x, const Rotary& rotary);

  std::shared_ptr<layers::Projection> q_proj, k_proj, v_proj, o_proj;

 private:
  int64_t heads_, kv_heads_, head_dim_;
  double dropout_;
};

/// down(silu(gate(x)) * up(x)).
class SwiGlu : public torch::nn::Module {
 public:
  explicit SwiGlu(const Shape& shape);
  at::Tensor forward(const at::Tensor& x) const {
    return down_proj->forward(at::silu(gate_proj->forward(x)) * up_proj->forward(x));
  }

  std::shared_ptr<layers::Projection> gate_proj, up_proj, down_proj;
};

/// x + attention(norm(x)), then + mlp(norm(.)).
class DecoderLayer : public torch::nn::Module {
 public:
  explicit DecoderLayer(const Shape& shape);
  at::Tensor forward(const at::Tensor& x, const Rotary& rotary) {
    const at::Tensor h = x + self_attn->forward(input_layernorm->forward(x), rotary);
    return h + mlp->forward(post_attention_layernorm->forward(h));
  }

  std::shared_ptr<Attention> self_attn;
  std::shared_ptr<SwiGlu> mlp;
  std::shared_ptr<RmsNorm> input_layernorm, post_attention_layernorm;
};

/// Llama: token embedding, decoder layers, a final RMSNorm, the head (tied
/// to the token embedding, or a weight of its own); Qwen2 and Mistral too.
class Llama : public Model {
 public:
  Llama(Params& params, const DatasetInfo& info, Family family = Family::kLlama);

  at::Tensor forward(const at::Tensor& ids) override;
  /// state_dict.pt, and `dir`/hf in Hugging Face's Llama layout.
  void export_trained(const std::string& dir) override;
  /// A Hugging Face directory of the model's family (config.json, model.safetensors).
  NamedTensors import_pretrained(const std::string& dir) override;
  std::string hugging_face_module(const std::string& name) const override {
    return name.rfind("lm_head", 0) == 0 ? name : "model." + name;
  }

  const Shape& shape() const { return shape_; }
  /// The dtype hf/ is written in ("export_dtype": float32 by default, or the
  /// checkpoint init_from read's) and the size above which it is split.
  at::ScalarType export_dtype() const { return export_dtype_ == at::ScalarType::Undefined ? loaded_dtype_ : export_dtype_; }
  std::uintmax_t export_max_shard_bytes() const { return export_max_shard_bytes_; }

 private:
  Shape shape_;
  at::ScalarType export_dtype_ = at::kFloat;  // kUndefined: as loaded
  at::ScalarType loaded_dtype_ = at::kFloat;  // the init_from checkpoint's weights' dtype
  std::uintmax_t export_max_shard_bytes_ = 0;
  std::shared_ptr<layers::Embedding> embed_tokens_;
  std::vector<std::shared_ptr<DecoderLayer>> layers_;
  std::shared_ptr<RmsNorm> norm_;
  std::shared_ptr<layers::Projection> lm_head_;  // null when tied
};

/// This model's parameters as Hugging Face's LlamaForCausalLM names them,
/// and back: models/llama_hugging_face.cpp.
void write_hugging_face(Llama& model, const std::string& dir);
/// `stored_dtype` becomes the dtype the checkpoint's embedding was stored in.
NamedTensors read_hugging_face(const Llama& model, const std::string& dir, at::ScalarType& stored_dtype);

}  // namespace basin::llama
