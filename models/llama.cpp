// "model": {"name": "llama"}: the Llama architecture (Touvron et al., 2023),
// the layer of Llama 2 and 3, SmolLM2 and TinyLlama, over token ids
// [n, T] to next-token logits [n, T, vocab_size]. Keys are named as in
// Hugging Face's config.json:
//
//     {"name": "llama", "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4,
//      "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 10000.0,
//      "rms_norm_eps": 1e-6, "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": false}
//
// A token embedding; num_hidden_layers pre-RMSNorm layers of causal
// self-attention with grouped-query heads and rotary positions, and a
// SwiGLU MLP, each added to the residual stream; a final RMSNorm; the head,
// tied to the token embedding or a weight of its own. attention_bias puts a
// bias on q, k, v and o, mlp_bias on the MLP's three projections. RoPE is
// unscaled: a "rope_scaling" is refused. "vocab_size" and
// "max_position_embeddings" default to the data's vocabulary and window
// (larger ones are allowed); "intermediate_size" to 8/3 hidden_size rounded
// up to a multiple of 32, "head_dim" to hidden_size / num_attention_heads
// (hidden_size a multiple of it, as LlamaConfig requires).
// Parameters are named as in LlamaForCausalLM without its "model." prefix
// (embed_tokens, layers.0.self_attn.q_proj, ..., norm, lm_head). Weights
// start as Hugging Face's do: normal(0, initializer_range), biases zero,
// norms one.
//
// "qwen2" and "mistral" are the same layer with those checkpoints' biases
// and keys: Qwen2 has a bias on q, k and v (not o; no attention_bias or
// mlp_bias key) and "use_sliding_window" false; Mistral has no bias, and a
// "sliding_window" null or at least max_position_embeddings (basin's
// attention sees the whole window).
//
// Under zero3 the embedding (whole for its lookup, and again as a tied
// head), every decoder layer and an untied head are units; the final norm
// is the root unit.
//
// At the end of a run hf/ holds the model in its Hugging Face layout:
// "export_dtype" float32 (the default), bfloat16, float16, or "init_from"
// (the dtype the checkpoint it started from was stored in), split into
// several files above "export_max_shard_size" (bytes, or "500MB", "5GB",
// "2GiB"; default "5GB", as save_pretrained's).
#include "basin/models/llama.h"

#include <stdexcept>

#include <torch/nn/modules/container/modulelist.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/serialization/safetensors_checkpoint.h"

namespace basin::llama {
namespace {

Shape shape_from(Params& params, const DatasetInfo& info, Family family) {
  layers::require_token_windows(name_of(family), info);
  Shape shape{};
  shape.family = family;
  shape.vocab_size = params.integer("vocab_size", info.num_classes, info.num_classes);
  shape.max_position_embeddings = params.integer("max_position_embeddings", info.input_shape[0], info.input_shape[0]);
  shape.hidden_size = params.integer("hidden_size", 128, 1);
  shape.intermediate_size = params.integer("intermediate_size", (8 * shape.hidden_size / 3 + 31) / 32 * 32, 1);
  shape.num_hidden_layers = params.integer("num_hidden_layers", 4, 1);
  shape.num_attention_heads = params.integer("num_attention_heads", 4, 1);
  shape.num_key_value_heads = params.integer("num_key_value_heads", shape.num_attention_heads, 1);
  if (shape.num_attention_heads % shape.num_key_value_heads != 0) {
    params.fail("num_key_value_heads", "a divisor of num_attention_heads (" +
                std::to_string(shape.num_attention_heads) + ")", Json(shape.num_key_value_heads));
  }
  // As LlamaConfig requires it (from_pretrained refuses a config without it), head_dim given or not.
  if (shape.hidden_size % shape.num_attention_heads != 0) {
    params.fail("hidden_size", "a multiple of num_attention_heads (" + std::to_string(shape.num_attention_heads) + ")",
                Json(shape.hidden_size));
  }
  const bool head_dim_given = params.has("head_dim");
  shape.head_dim = params.integer("head_dim", shape.hidden_size / shape.num_attention_heads, 1);
  if (shape.head_dim % 2 != 0) {
    const std::string expected = "an even number (RoPE rotates pairs)";
    if (head_dim_given) params.fail("head_dim", expected, Json(shape.head_dim));
    params.fail("num_attention_heads", "a count that leaves hidden_size / num_attention_heads " + expected + ", or a head_dim",
                Json(shape.num_attention_heads));
  }
  shape.rms_norm_eps = params.positive("rms_norm_eps", 1e-6);
  shape.rope_theta = params.positive("rope_theta", 10000.0);
  shape.attention_dropout = params.number("attention_dropout", 0.0, 0.0, 1.0);
  if (shape.attention_dropout >= 1.0) params.fail("attention_dropout", "a probability below 1", Json(shape.attention_dropout));
  shape.initializer_range = params.number("initializer_range", 0.02, 0.0, 1.0);  // LlamaConfig's bounds
  if (!(shape.initializer_range > 0)) params.fail("initializer_range", "a number in (0, 1]", Json(shape.initializer_range));
  switch (family) {
    case Family::kLlama:
      shape.qkv_bias = shape.o_bias = params.boolean("attention_bias", false);
      shape.mlp_bias = params.boolean("mlp_bias", false);
      break;
    case Family::kQwen2:
      shape.qkv_bias = true;
      if (params.boolean("use_sliding_window", false)) {
        params.fail("use_sliding_window", "false: basin's attention sees the whole window", Json(true));
      }
      break;
    case Family::kMistral:
      shape.sliding_window = params.raw("sliding_window");
      if (window_slides(shape.sliding_window, shape.max_position_embeddings)) {
        params.fail("sliding_window", "null or at least max_position_embeddings (" +
                    std::to_string(shape.max_position_embeddings) + "): basin's attention sees the whole window",
                    shape.sliding_window);
      }
      break;
  }
  shape.tie_word_embeddings = params.boolean("tie_word_embeddings", false);
  const Json scaling = params.raw("rope_scaling");
  if (!scaling.is_null()) params.fail("rope_scaling", "null (basin applies RoPE unscaled)", scaling);
  return shape;
}

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

Rotary Rotary::of(int64_t positions, int64_t head_dim, double theta, const at::TensorOptions& options) {
  // In fp32, as Llama computes them: theta^(2i/d) as a power of the scalar, then its inverse.
  const auto fp32 = options.dtype(at::kFloat);
  const at::Tensor inv_freq = 1.0 / at::pow(theta, at::arange(0, head_dim, 2, fp32) / static_cast<double>(head_dim));
  const at::Tensor freqs = at::arange(positions, fp32).unsqueeze(1) * inv_freq.unsqueeze(0);
  const at::Tensor angles = at::cat({freqs, freqs}, -1);
  return {angles.cos().to(options.dtype()), angles.sin().to(options.dtype())};
}

at::Tensor Rotary::apply(const at::Tensor& x) const { return x * cos + rotate_half(x) * sin; }

Attention::Attention(const Shape& shape)
    : heads_(shape.num_attention_heads), kv_heads_(shape.num_key_value_heads), head_dim_(shape.head_dim),
      dropout_(shape.attention_dropout) {
  const double std = shape.initializer_range;
  const bool bias = shape.qkv_bias;
  q_proj = register_module("q_proj", std::make_shared<layers::Projection>(shape.hidden_size, heads_ * head_dim_, bias, std));
  k_proj = register_module("k_proj", std::make_shared<layers::Projection>(shape.hidden_size, kv_heads_ * head_dim_, bias, std));
  v_proj = register_module("v_proj", std::make_shared<layers::Projection>(shape.hidden_size, kv_heads_ * head_dim_, bias, std));
  o_proj = register_module("o_proj",
                           std::make_shared<layers::Projection>(heads_ * head_dim_, shape.hidden_size, shape.o_bias, std));
}

at::Tensor Attention::forward(const at::Tensor& x, const Rotary& rotary) {
  const int64_t n = x.size(0), t = x.size(1);
  auto heads = [&](const at::Tensor& projected, int64_t count) {
    return projected.view({n, t, count, head_dim_}).transpose(1, 2);  // [n, count, T, head_dim]
  };
  const at::Tensor q = rotary.apply(heads(q_proj->forward(x), heads_));
  // Each key and value head serves heads / kv_heads query heads in a row.
  const int64_t group = heads_ / kv_heads_;
  const at::Tensor k = rotary.apply(heads(k_proj->forward(x), kv_heads_)).repeat_interleave(group, 1);
  const at::Tensor v = heads(v_proj->forward(x), kv_heads_).repeat_interleave(group, 1);
  const at::Tensor y = compat::causal_attention(q, k, v, is_training() ? dropout_ : 0.0);
  return o_proj->forward(y.transpose(1, 2).reshape({n, t, heads_ * head_dim_}));
}

SwiGlu::SwiGlu(const Shape& shape) {
  const double std = shape.initializer_range;
  const int64_t width = shape.hidden_size, inner = shape.intermediate_size;
  gate_proj = register_module("gate_proj", std::make_shared<layers::Projection>(width, inner, shape.mlp_bias, std));
  up_proj = register_module("up_proj", std::make_shared<layers::Projection>(width, inner, shape.mlp_bias, std));
  down_proj = register_module("down_proj", std::make_shared<layers::Projection>(inner, width, shape.mlp_bias, std));
}

DecoderLayer::DecoderLayer(const Shape& shape) {
  self_attn = register_module("self_attn", std::make_shared<Attention>(shape));
  mlp = register_module("mlp", std::make_shared<SwiGlu>(shape));
  input_layernorm = register_module("input_layernorm", std::make_shared<RmsNorm>(shape.hidden_size, shape.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<RmsNorm>(shape.hidden_size, shape.rms_norm_eps));
}

const char* name_of(Family family) {
  switch (family) {
    case Family::kLlama: break;
    case Family::kQwen2: return "qwen2";
    case Family::kMistral: return "mistral";
  }
  return "llama";
}

const char* architecture_of(Family family) {
  switch (family) {
    case Family::kLlama: break;
    case Family::kQwen2: return "Qwen2ForCausalLM";
    case Family::kMistral: return "MistralForCausalLM";
  }
  return "LlamaForCausalLM";
}

bool window_slides(const Json& window, int64_t positions) {
  // A query at position q sees keys past q - window: all of them while window >= positions.
  return !window.is_null() && !(window.is_number_integer() && window.get<int64_t>() >= positions);
}

Llama::Llama(Params& params, const DatasetInfo& info, Family family) : shape_(shape_from(params, info, family)) {
  const std::string dtype = params.choice("export_dtype", "float32", {"float32", "bfloat16", "float16", "init_from"});
  export_dtype_ = dtype == "bfloat16" ? at::kBFloat16 : dtype == "float16" ? at::kHalf : dtype == "init_from" ? at::ScalarType::Undefined : at::kFloat;
  const Json shard_size = params.raw("export_max_shard_size");
  try {
    export_max_shard_bytes_ = shard_size.is_null() ? parse_byte_size("5GB")
                              : shard_size.is_number_unsigned() && shard_size.get<uint64_t>() > 0 ? shard_size.get<uint64_t>()
                              : parse_byte_size(shard_size.is_string() ? shard_size.get<std::string>() : shard_size.dump());
  } catch (const std::invalid_argument& bad) {
    params.fail("export_max_shard_size", "a size in bytes, or a string such as \"500MB\" or \"5GB\"", shard_size);
  }
  embed_tokens_ = register_module(
      "embed_tokens", std::make_shared<layers::Embedding>(shape_.vocab_size, shape_.hidden_size, shape_.initializer_range));
  auto layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < shape_.num_hidden_layers; ++i) {
    layers_.push_back(std::make_shared<DecoderLayer>(shape_));
    layers->push_back(layers_.back());
  }
  norm_ = register_module("norm", std::make_shared<RmsNorm>(shape_.hidden_size, shape_.rms_norm_eps));
  if (!shape_.tie_word_embeddings) {
    lm_head_ = register_module("lm_head", std::make_shared<layers::Projection>(shape_.hidden_size, shape_.vocab_size,
                                                                               false, shape_.initializer_range));
  }
  // zero3 gathers the embedding for its lookup (and for the tied head), one layer at a time, and the head.
  declare_unit(*embed_tokens_, Recompute::kNever);
  for (auto& layer : layers_) declare_unit(*layer);
  if (lm_head_) declare_unit(*lm_head_, Recompute::kNever);
}

at::Tensor Llama::forward(const at::Tensor& ids) {
  const int64_t t = ids.size(1);
  if (t > shape_.max_position_embeddings) {
    throw std::invalid_argument(std::string(name_of(shape_.family)) + ": a sequence of " + std::to_string(t) + " tokens, past max_position_embeddings " +
                                std::to_string(shape_.max_position_embeddings));
  }
  at::Tensor x = lookup(*embed_tokens_, [&] { return embed_tokens_->forward(ids); });
  const Rotary rotary = Rotary::of(t, shape_.head_dim, shape_.rope_theta, x.options());
  // The rotary tables are captured by value: a checkpointed layer runs again after this returns.
  for (auto& layer : layers_) {
    x = unit(*layer, x, [layer, rotary](const at::Tensor& in) { return layer->forward(in, rotary); });
  }
  const at::Tensor normed = norm_->forward(x);
  if (lm_head_) return unit(*lm_head_, normed, [head = lm_head_](const at::Tensor& in) { return head->forward(in); });
  return unit(*embed_tokens_, normed, [table = embed_tokens_](const at::Tensor& in) { return at::linear(in, table->weight); });
}

void Llama::export_trained(const std::string& dir) {
  Model::export_trained(dir);
  write_hugging_face(*this, dir + "/hf");
}

NamedTensors Llama::import_pretrained(const std::string& dir) { return read_hugging_face(*this, dir, loaded_dtype_); }

namespace {
BASIN_REGISTER(model_registry(), "llama", Llama);
// The same layer with Qwen2's and Mistral's biases, names and checks.
[[maybe_unused]] const bool qwen2_registered = model_registry().add(
    "qwen2", [](Params& params, const DatasetInfo& info) { return std::make_shared<Llama>(params, info, Family::kQwen2); });
[[maybe_unused]] const bool mistral_registered = model_registry().add(
    "mistral", [](Params& params, const DatasetInfo& info) { return std::make_shared<Llama>(params, info, Family::kMistral); });
}  // namespace

}  // namespace basin::llama
