#pragma once

// The "llama" model's parts, and those of every family of Llama's decoder
// layer (decoder_families.h: qwen2, mistral, qwen3, gemma2, gemma3).
// models/llama.cpp builds and registers them; their Hugging Face layout is
// models/llama_hugging_face.cpp. Not installed: the models are used by
// their registered names.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "basin/core/config/json.h"
#include "basin/core/model/model.h"
#include "basin/models/attention.h"
#include "basin/models/decoder_shape.h"
#include "basin/models/rope.h"
#include "basin/models/transformer_layers.h"

namespace basin::llama {

/// x / sqrt(mean(x^2) + eps) over the last dimension in fp32, then times
/// the weight: cast back first (Llama), or times 1 + weight in fp32 and
/// cast after (Gemma, whose weight starts at 0).
class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(int64_t width, double eps, bool plus_one = false) : eps_(eps), plus_one_(plus_one) {
    weight = register_parameter("weight", plus_one ? at::zeros({width}) : at::ones({width}));
  }
  at::Tensor forward(const at::Tensor& x) const {
    const at::Tensor wide = x.to(at::kFloat);
    const at::Tensor normed = wide * at::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    if (plus_one_) return (normed * (1.0 + weight.to(at::kFloat))).to(x.scalar_type());
    return weight * normed.to(x.scalar_type());
  }

  at::Tensor weight;

 private:
  double eps_;
  bool plus_one_;
};

/// Causal self-attention with grouped-query heads: num_key_value_heads key
/// and value heads, each shared by num_attention_heads / num_key_value_heads
/// query heads; queries and keys normed per head where the family does,
/// then rotated by position; the layer's window, scale and soft-cap.
class Attention : public torch::nn::Module {
 public:
  Attention(const Shape& shape, int64_t layer);
  at::Tensor forward(const at::Tensor& x, const Rotary& rotary);

  std::shared_ptr<layers::Projection> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<RmsNorm> q_norm, k_norm;  // null but in Qwen3 and Gemma 3

 private:
  int64_t heads_, kv_heads_, head_dim_;
  double dropout_;
  layers::AttentionMask mask_;
  layers::AttentionOptions options_;
};

/// down(act(gate(x)) * up(x)): SwiGLU (silu) or GeGLU (gelu's tanh form).
class GatedMlp : public torch::nn::Module {
 public:
  explicit GatedMlp(const Shape& shape);
  at::Tensor forward(const at::Tensor& x) const {
    const at::Tensor gate = gate_proj->forward(x);
    return down_proj->forward((gelu_ ? at::gelu(gate, "tanh") : at::silu(gate)) * up_proj->forward(x));
  }

  std::shared_ptr<layers::Projection> gate_proj, up_proj, down_proj;

 private:
  bool gelu_;
};

/// x + attention(norm(x)), then + mlp(norm(.)); with sandwich norms (Gemma)
/// the attention's and the MLP's outputs are normed too before they are added.
class DecoderLayer : public torch::nn::Module {
 public:
  DecoderLayer(const Shape& shape, int64_t layer);
  at::Tensor forward(const at::Tensor& x, const Rotary& rotary) {
    if (!pre_feedforward_layernorm) {
      const at::Tensor h = x + self_attn->forward(input_layernorm->forward(x), rotary);
      return h + mlp->forward(post_attention_layernorm->forward(h));
    }
    const at::Tensor h = x + post_attention_layernorm->forward(self_attn->forward(input_layernorm->forward(x), rotary));
    return h + post_feedforward_layernorm->forward(mlp->forward(pre_feedforward_layernorm->forward(h)));
  }

  std::shared_ptr<Attention> self_attn;
  std::shared_ptr<GatedMlp> mlp;
  std::shared_ptr<RmsNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<RmsNorm> pre_feedforward_layernorm, post_feedforward_layernorm;  // sandwich norms alone
};

/// What a model keeps of the checkpoint init_from read, to write back.
struct LoadedCheckpoint {
  at::ScalarType dtype = at::kFloat;  // its weights' dtype
  Json token_ids = Json::object();    // config.json's bos_token_id, eos_token_id and pad_token_id, where given
};

/// Llama: token embedding (times sqrt(hidden_size) in Gemma), decoder
/// layers, a final RMSNorm, the head (tied to the token embedding, or a
/// weight of its own; its logits soft-capped in Gemma 2); and every family
/// of decoder_families.h.
class Llama : public Model {
 public:
  Llama(Params& params, const DatasetInfo& info, const Family& family);

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
  at::ScalarType export_dtype() const { return export_dtype_ == at::ScalarType::Undefined ? loaded_.dtype : export_dtype_; }
  const LoadedCheckpoint& loaded() const { return loaded_; }
  std::uintmax_t export_max_shard_bytes() const { return export_max_shard_bytes_; }

 private:
  Shape shape_;
  at::ScalarType export_dtype_ = at::kFloat;  // kUndefined: as loaded
  LoadedCheckpoint loaded_;
  std::uintmax_t export_max_shard_bytes_ = 0;
  std::shared_ptr<layers::Embedding> embed_tokens_;
  std::vector<std::shared_ptr<DecoderLayer>> layers_;
  std::shared_ptr<RmsNorm> norm_;
  std::shared_ptr<layers::Projection> lm_head_;  // null when tied
};

/// config.json is a checkpoint of `family`'s class, or a ConfigError after
/// `where` naming the families (models/decoder_pretrained_keys.cpp).
void check_checkpoint_kind(const Json& config, const Family& family, const std::string& where);

/// The model keys config.json gives `family`, each as its config class reads
/// it (absent or null: the class's default, where it has one) (models/decoder_pretrained_keys.cpp).
Json checkpoint_model_keys(const Json& config, const Family& family);

/// This model's parameters as Hugging Face's LlamaForCausalLM names them,
/// and back: models/llama_hugging_face.cpp.
void write_hugging_face(Llama& model, const std::string& dir);
/// `loaded` becomes what the model keeps of the checkpoint: the dtype its embedding was stored in, its token ids.
NamedTensors read_hugging_face(const Llama& model, const std::string& dir, LoadedCheckpoint& loaded);

}  // namespace basin::llama
