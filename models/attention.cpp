#include "basin/models/attention.h"

#include <cmath>
#include <limits>

#include "basin/core/base/torch_compat.h"

namespace basin::layers {

at::Tensor visible_keys(int64_t positions, const AttentionMask& mask, const at::Device& device) {
  const at::Tensor query = at::arange(positions, at::TensorOptions(at::kLong).device(device)).unsqueeze(1);
  const at::Tensor key = query.transpose(0, 1);
  at::Tensor visible = key <= query;
  if (mask.window > 0) visible = visible.logical_and(key > query - mask.window);
  visible = visible.view({1, 1, positions, positions});
  if (mask.documents.defined()) {
    const at::Tensor ids = mask.documents.to(device);
    visible = visible.logical_and((ids.unsqueeze(2) == ids.unsqueeze(1)).unsqueeze(1));
  }
  return visible;
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                     const AttentionOptions& options) {
  const int64_t t = q.size(-2);
  const bool causal_only = (mask.window == 0 || mask.window >= t) && !mask.documents.defined();
  if (causal_only && options.scale == 0 && options.softcap == 0) {
    return compat::causal_attention(q, k, v, options.dropout);
  }
  const at::Tensor visible = visible_keys(t, mask, q.device());
  const double scale = options.scale != 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
#if BASIN_TORCH_AT_LEAST(2, 1)
  if (options.softcap == 0) return at::scaled_dot_product_attention(q, k, v, visible, options.dropout, false, scale);
#endif
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  if (options.softcap != 0) scores = at::tanh(scores / options.softcap) * options.softcap;
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor weights = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  if (options.dropout > 0) weights = at::dropout(weights, options.dropout, /*train=*/true);
  return at::matmul(weights, v);
}

}  // namespace basin::layers
