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
// as the keys say (models/rope.h): "rope_theta", and a scaling in
// "rope_scaling" (transformers 4) or "rope_parameters" (5). "vocab_size" and
// "max_position_embeddings" default to the data's vocabulary and window
// (larger ones are allowed); "intermediate_size" to 8/3 hidden_size rounded
// up to a multiple of 32, "head_dim" to hidden_size / num_attention_heads
// (hidden_size a multiple of it, as LlamaConfig requires).
// Parameters are named as in LlamaForCausalLM without its "model." prefix
// (embed_tokens, layers.0.self_attn.q_proj, ..., norm, lm_head). Weights
// start as Hugging Face's do: normal(0, initializer_range), biases zero,
// norms one (Gemma's, whose norm is x·(1 + w), zero).
//
// The other families are rows of decoder_families.h, each registered by
// its name ("qwen2", "mistral", "qwen3", "gemma2", "gemma3"), with their
// config classes' keys and defaults: Qwen2's bias on q, k and v; Qwen3's
// norms on q and k; Gemma's norms, scaled embeddings, GeGLU,
// query_pre_attn_scalar and soft-caps; and the windows that slide, over
// every layer ("sliding_window", Mistral), from max_window_layers on where
// use_sliding_window says so (Qwen), or on the sliding layers of
// "layer_types" (Gemma: all but each second or sixth by default).
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

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <torch/nn/modules/container/modulelist.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/serialization/safetensors_checkpoint.h"

namespace basin::llama {
namespace {

Shape shape_from(Params& params, const DatasetInfo& info, const Family& family) {
  layers::require_token_windows(family.name, info);
  Shape shape{};
  shape.family = &family;
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
  shape.attention_dropout = params.number("attention_dropout", 0.0, 0.0, 1.0);
  if (shape.attention_dropout >= 1.0) params.fail("attention_dropout", "a probability below 1", Json(shape.attention_dropout));
  shape.initializer_range = params.number("initializer_range", 0.02, 0.0, 1.0);  // LlamaConfig's bounds
  if (!(shape.initializer_range > 0)) params.fail("initializer_range", "a number in (0, 1]", Json(shape.initializer_range));
  switch (family.attention_bias) {
    case AttentionBias::kByKey: shape.qkv_bias = shape.o_bias = params.boolean("attention_bias", false); break;
    case AttentionBias::kQkv: shape.qkv_bias = true; break;
    case AttentionBias::kNone: break;
  }
  if (family.mlp_bias_key) shape.mlp_bias = params.boolean("mlp_bias", false);
  shape.tie_word_embeddings = params.boolean("tie_word_embeddings", family.hf_tied);
  // An integer, as Gemma's config class types it.
  shape.query_pre_attn_scalar = family.attention_scalar ? params.integer("query_pre_attn_scalar", shape.head_dim, 1) : shape.head_dim;
  if (family.softcap_keys) {
    auto cap = [&](const char* key, double fallback) {
      const Json value = params.has(key) ? params.raw(key) : Json(fallback);
      if (value.is_null() || (value.is_number() && value.get<double>() == 0)) return 0.0;
      if (!value.is_number() || !(value.get<double>() > 0)) params.fail(key, "a positive cap, or null for none", value);
      return value.get<double>();
    };
    shape.attention_softcap = cap("attn_logit_softcapping", family.default_attention_softcap);
    if (shape.attention_softcap != 0 && !family.caps_attention) {
      params.fail("attn_logit_softcapping", std::string("null: ") + family.architecture + "'s attention applies no cap",
                  Json(shape.attention_softcap));
    }
    shape.final_softcap = cap("final_logit_softcapping", family.default_final_softcap);
  }
  if (family.bidirectional_key && params.boolean("use_bidirectional_attention", false)) {
    params.fail("use_bidirectional_attention", "false: basin's attention is causal", Json(true));
  }
  const RopeFailure fail = [&](const std::string& key, const std::string& expected, const Json& value) {
    params.fail(key, expected, value);
  };
  // Read through Params, so that each key counts as read; a key the family has not stays unknown.
  const KeyLookup key = [&](const char* name) { return params.has(name) ? params.raw(name) : Json(Json::value_t::discarded); };
  read_windows(shape, key, fail);
  read_rope_of_layers(shape, key, fail);
  return shape;
}

}  // namespace

Attention::Attention(const Shape& shape, int64_t layer)
    : heads_(shape.num_attention_heads), kv_heads_(shape.num_key_value_heads), head_dim_(shape.head_dim),
      dropout_(shape.attention_dropout) {
  const double std = shape.initializer_range;
  const bool bias = shape.qkv_bias;
  q_proj = register_module("q_proj", std::make_shared<layers::Projection>(shape.hidden_size, heads_ * head_dim_, bias, std));
  k_proj = register_module("k_proj", std::make_shared<layers::Projection>(shape.hidden_size, kv_heads_ * head_dim_, bias, std));
  v_proj = register_module("v_proj", std::make_shared<layers::Projection>(shape.hidden_size, kv_heads_ * head_dim_, bias, std));
  o_proj = register_module("o_proj",
                           std::make_shared<layers::Projection>(heads_ * head_dim_, shape.hidden_size, shape.o_bias, std));
  if (shape.family->qk_norms) {
    const bool plus_one = shape.family->norm_plus_one;
    q_norm = register_module("q_norm", std::make_shared<RmsNorm>(head_dim_, shape.rms_norm_eps, plus_one));
    k_norm = register_module("k_norm", std::make_shared<RmsNorm>(head_dim_, shape.rms_norm_eps, plus_one));
  }
  mask_.window = shape.window_of(layer);
  if (shape.family->attention_scalar) options_.scale = 1.0 / std::sqrt(static_cast<double>(shape.query_pre_attn_scalar));
  options_.softcap = shape.attention_softcap;
}

at::Tensor Attention::forward(const at::Tensor& x, const Rotary& rotary) {
  const int64_t n = x.size(0), t = x.size(1);
  auto heads = [&](const at::Tensor& projected, int64_t count, const std::shared_ptr<RmsNorm>& norm) {
    at::Tensor split = projected.view({n, t, count, head_dim_});
    if (norm) split = norm->forward(split);
    return split.transpose(1, 2);  // [n, count, T, head_dim]
  };
  const at::Tensor q = rotary.apply(heads(q_proj->forward(x), heads_, q_norm));
  // Each key and value head serves heads / kv_heads query heads in a row.
  const int64_t group = heads_ / kv_heads_;
  const at::Tensor k = rotary.apply(heads(k_proj->forward(x), kv_heads_, k_norm)).repeat_interleave(group, 1);
  const at::Tensor v = heads(v_proj->forward(x), kv_heads_, nullptr).repeat_interleave(group, 1);
  layers::AttentionOptions options = options_;
  options.dropout = is_training() ? dropout_ : 0.0;
  const at::Tensor y = layers::attention(q, k, v, mask_, options);
  return o_proj->forward(y.transpose(1, 2).reshape({n, t, heads_ * head_dim_}));
}

GatedMlp::GatedMlp(const Shape& shape) : gelu_(std::string(shape.family->activation) != "silu") {
  const double std = shape.initializer_range;
  const int64_t width = shape.hidden_size, inner = shape.intermediate_size;
  gate_proj = register_module("gate_proj", std::make_shared<layers::Projection>(width, inner, shape.mlp_bias, std));
  up_proj = register_module("up_proj", std::make_shared<layers::Projection>(width, inner, shape.mlp_bias, std));
  down_proj = register_module("down_proj", std::make_shared<layers::Projection>(inner, width, shape.mlp_bias, std));
}

DecoderLayer::DecoderLayer(const Shape& shape, int64_t layer) {
  self_attn = register_module("self_attn", std::make_shared<Attention>(shape, layer));
  mlp = register_module("mlp", std::make_shared<GatedMlp>(shape));
  auto norm = [&](const char* name) {
    return register_module(name, std::make_shared<RmsNorm>(shape.hidden_size, shape.rms_norm_eps, shape.family->norm_plus_one));
  };
  input_layernorm = norm("input_layernorm");
  post_attention_layernorm = norm("post_attention_layernorm");
  if (shape.family->sandwich_norms) {
    pre_feedforward_layernorm = norm("pre_feedforward_layernorm");
    post_feedforward_layernorm = norm("post_feedforward_layernorm");
  }
}

Llama::Llama(Params& params, const DatasetInfo& info, const Family& family) : shape_(shape_from(params, info, family)) {
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
    layers_.push_back(std::make_shared<DecoderLayer>(shape_, i));
    layers->push_back(layers_.back());
  }
  norm_ = register_module("norm", std::make_shared<RmsNorm>(shape_.hidden_size, shape_.rms_norm_eps, family.norm_plus_one));
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
    throw std::invalid_argument(std::string(shape_.family->name) + ": a sequence of " + std::to_string(t) + " tokens, past max_position_embeddings " +
                                std::to_string(shape_.max_position_embeddings));
  }
  at::Tensor x = lookup(*embed_tokens_, [&] { return embed_tokens_->forward(ids); });
  if (shape_.family->scaled_embeddings) {
    // sqrt(hidden_size) rounded to fp32, then to the weights' dtype, as Gemma's scaled embedding rounds it.
    x = x * at::scalar_tensor(std::sqrt(static_cast<double>(shape_.hidden_size)), at::kFloat).to(x.scalar_type());
  }
  std::map<std::string, Rotary> rotaries;  // one table a layer type
  for (const auto& [type, rope] : shape_.rope) {
    rotaries.emplace(type, Rotary::of(t, rope, shape_.head_dim, shape_.max_position_embeddings, x.options()));
  }
  // The rotary tables are captured by value: a checkpointed layer runs again after this returns.
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    x = unit(*layers_[i], x, [layer = layers_[i], rotary = rotaries.at(shape_.layer_types[i])](const at::Tensor& in) {
      return layer->forward(in, rotary);
    });
  }
  const at::Tensor normed = norm_->forward(x);
  at::Tensor logits =
      lm_head_ ? unit(*lm_head_, normed, [head = lm_head_](const at::Tensor& in) { return head->forward(in); })
               : unit(*embed_tokens_, normed, [table = embed_tokens_](const at::Tensor& in) { return at::linear(in, table->weight); });
  const double cap = shape_.final_softcap;
  return cap == 0 ? logits : at::tanh(logits / cap) * cap;
}

void Llama::export_trained(const std::string& dir) {
  Model::export_trained(dir);
  write_hugging_face(*this, dir + "/hf");
}

NamedTensors Llama::import_pretrained(const std::string& dir) { return read_hugging_face(*this, dir, loaded_); }

namespace {
// One model a row of the table, by the row's name.
[[maybe_unused]] const bool families_registered = [] {
  for (const Family& family : families()) {
    model_registry().add(family.name, [&family](Params& params, const DatasetInfo& info) {
      return std::make_shared<Llama>(params, info, family);
    });
  }
  return true;
}();
}  // namespace

}  // namespace basin::llama
