// "model": {"name": "gpt"}: GPT-2's architecture (Radford et al., 2019) over
// token ids [n, T] to next-token logits [n, T, vocab_size]:
//
//     {"name": "gpt", "n_layer": 4, "n_head": 4, "n_embd": 128, "dropout": 0.0, "bias": true}
//
// Token and learned position embeddings; n_layer pre-LayerNorm blocks of
// causal self-attention and a GELU (tanh) MLP of 4 n_embd, each added to the
// residual stream; a final LayerNorm; the head tied to the token embedding
// (one parameter: every mode and checkpoint sees it once). "vocab_size" and
// "block_size" default to the data's vocabulary and window; larger ones are
// allowed (a model meant for more). Parameters are named as in Hugging
// Face's GPT-2 without its "transformer." prefix (wte, wpe, h.0.attn.c_attn,
// ...); GPT-2's linear weights are stored [out, in] here, transposed from
// its Conv1D's [in, out]. Weights start as GPT-2's do: normal(0, 0.02),
// the residual projections' std 0.02 / sqrt(2 n_layer), biases zero.
//
// Under zero3 the token embedding is a unit of its own, whole for its
// lookup and again for the tied head, and every block is a unit; the
// position embedding and the final LayerNorm are the root unit.
#include "basin/models/gpt.h"

namespace basin::gpt {
namespace {

Shape shape_from(Params& params, const DatasetInfo& info) {
  layers::require_token_windows("gpt", info);
  Shape shape{};
  shape.vocab_size = params.integer("vocab_size", info.num_classes, info.num_classes);
  shape.block_size = params.integer("block_size", info.input_shape[0], info.input_shape[0]);
  shape.n_layer = params.integer("n_layer", 4, 1);
  shape.n_head = params.integer("n_head", 4, 1);
  shape.n_embd = params.integer("n_embd", 128, 1);
  shape.dropout = params.number("dropout", 0.0, 0.0, 1.0);
  shape.bias = params.boolean("bias", true);
  if (shape.dropout >= 1.0) params.fail("dropout", "a probability below 1", Json(shape.dropout));
  if (shape.n_embd % shape.n_head != 0) {
    params.fail("n_embd", "a multiple of n_head (" + std::to_string(shape.n_head) + ")", Json(shape.n_embd));
  }
  return shape;
}

}  // namespace

Gpt::Gpt(Params& params, const DatasetInfo& info) : shape_(shape_from(params, info)) {
  wte_ = register_module("wte", std::make_shared<Embedding>(shape_.vocab_size, shape_.n_embd));
  wpe_ = register_module("wpe", std::make_shared<Embedding>(shape_.block_size, shape_.n_embd));
  auto h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < shape_.n_layer; ++i) {
    blocks_.push_back(std::make_shared<Block>(shape_));
    h->push_back(blocks_.back());
  }
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(shape_.n_embd, shape_.bias));
  // zero3 gathers the token embedding for its lookup and for the head, and one block at a time.
  declare_unit(*wte_, Recompute::kNever);
  for (auto& block : blocks_) declare_unit(*block);
}

at::Tensor Gpt::forward(const at::Tensor& ids) {
  const int64_t t = ids.size(1);
  if (t > shape_.block_size) {
    throw std::invalid_argument("gpt: a sequence of " + std::to_string(t) + " tokens, past block_size " +
                                std::to_string(shape_.block_size));
  }
  const at::Tensor positions = at::arange(t, at::TensorOptions(at::kLong).device(ids.device()));
  const at::Tensor tokens = lookup(*wte_, [&] { return wte_->forward(ids); });
  at::Tensor x = at::dropout(tokens + wpe_->forward(positions), shape_.dropout, is_training());
  for (auto& block : blocks_) x = unit(*block, x, [block](const at::Tensor& in) { return block->forward(in); });
  // The head is the token embedding, its unit run again.
  return unit(*wte_, ln_f_->forward(x), [wte = wte_](const at::Tensor& in) { return at::linear(in, wte->weight); });
}

void Gpt::export_trained(const std::string& dir) {
  Model::export_trained(dir);
  write_hugging_face(*this, dir + "/hf");
}

NamedTensors Gpt::import_pretrained(const std::string& dir) { return read_hugging_face(*this, dir); }

namespace {
BASIN_REGISTER(model_registry(), "gpt", Gpt);
}  // namespace

}  // namespace basin::gpt
