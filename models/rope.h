#pragma once

// Rotary position embeddings (Su et al., 2021) as checkpoints configure
// them: the base theta, a scaling type and its keys, and the share of each
// head that rotates. transformers' modeling_rope_utils.py is the reference:
// "default", "linear", "dynamic" (NTK), "yarn", "llama3" (Llama 3.1-3.3) and
// "longrope" (Phi-3, Phi-4-mini), in transformers 4's `rope_scaling` or 5's
// `rope_parameters`, nested per layer type where a family's layers differ
// (Gemma 3's sliding and full layers).
#include <cstdint>
#include <functional>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/config/json.h"

namespace basin::llama {

/// One layer type's RoPE: the object transformers 5 stores as
/// rope_parameters (rope_type, rope_theta, partial_rotary_factor and the
/// type's own keys), read and checked.
struct RopeParameters {
  std::string type = "default";
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  /// "factor", or for yarn and longrope without one, max_position_embeddings / original_max_position_embeddings.
  double factor = 1.0;
  /// yarn's, llama3's and longrope's pretraining length: the key, or max_position_embeddings where absent.
  double original_max_position_embeddings = 0;
  Json keys = Json::object();  // the object as given, with rope_type and rope_theta: what export writes back

  /// The features of a head that rotate: int(head_dim * partial_rotary_factor), as transformers truncates it.
  int64_t rotary_dim(int64_t head_dim) const;
};

/// Says what is wrong with a RoPE key: (the key, what was expected, the value
/// found). It throws.
using RopeFailure = std::function<void(const std::string&, const std::string&, const Json&)>;

/// `object` (rope_parameters' or rope_scaling's form: "rope_type" or "type")
/// with "rope_theta" and "partial_rotary_factor" defaulting to the given
/// ones, checked as transformers validates it: every key the type needs,
/// with numbers where numbers go, and longrope's factors one per rotated
/// pair; "original_max_position_embeddings" defaults to
/// `max_position_embeddings` for the types that read it, as does "factor"
/// (divided by it) for yarn and longrope. An unknown type is refused naming it.
RopeParameters read_rope(const Json& object, double default_theta, double default_partial_rotary_factor,
                         int64_t head_dim, int64_t max_position_embeddings, const RopeFailure& fail);

/// The inverse frequencies [rotary_dim / 2] (fp32) and the factor cos and
/// sin are multiplied by, for a sequence of `positions` tokens: "dynamic"
/// and "longrope" change with it, past max_position_embeddings and past
/// original_max_position_embeddings.
struct RopeFrequencies {
  at::Tensor inverse;
  double attention_factor = 1.0;
};
RopeFrequencies rope_frequencies(const RopeParameters& rope, int64_t head_dim, int64_t max_position_embeddings,
                                 int64_t positions);

/// The cosines and sines of positions 0..T-1 at a RoPE's frequencies, each
/// repeated for both halves of the rotated features, [T, rotary_dim].
struct Rotary {
  at::Tensor cos, sin;
  /// The tables computed in fp32, times the attention factor, then cast to
  /// `options`' dtype: the residual stream's, as transformers casts them
  /// (fp32 under autocast, where the rotation of bf16 queries and keys is
  /// then done in fp32 too).
  static Rotary of(int64_t positions, const RopeParameters& rope, int64_t head_dim, int64_t max_position_embeddings,
                   const at::TensorOptions& options);
  /// x [n, heads, T, head_dim] with its first rotary_dim features rotated
  /// (x cos + rotate_half(x) sin) and the rest passed through, in the wider of the two dtypes.
  at::Tensor apply(const at::Tensor& x) const;
};

}  // namespace basin::llama
