#include "basin/models/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "basin/core/base/torch_compat.h"

namespace basin::layers {

namespace {

// Below this many positions the whole mask costs less than a call a block; and a block of at least
// kBlockQueries queries, so that a narrow window does not make a call of every few.
constexpr int64_t kBlockedFrom = 256, kBlockQueries = 128;

/// Which of keys [key_start, key_start + keys) queries [query_start, query_start + queries) see.
at::Tensor visible_between(int64_t query_start, int64_t queries, int64_t key_start, int64_t keys, const AttentionMask& mask,
                           const at::Device& device) {
  const at::TensorOptions positions = at::TensorOptions(at::kLong).device(device);
  const at::Tensor query = at::arange(query_start, query_start + queries, positions).unsqueeze(1);
  const at::Tensor key = at::arange(key_start, key_start + keys, positions).unsqueeze(0);
  at::Tensor visible = key <= query;
  if (mask.window > 0) visible = visible.logical_and(key > query - mask.window);
  visible = visible.view({1, 1, queries, keys});
  if (mask.documents.defined()) {
    const at::Tensor ids = mask.documents.to(device);
    visible = visible.logical_and(
        (ids.narrow(1, query_start, queries).unsqueeze(2) == ids.narrow(1, key_start, keys).unsqueeze(1)).unsqueeze(1));
  }
  return visible;
}

/// softmax(q k^T · scale, over the keys `visible` leaves) v.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& visible,
                  const AttentionOptions& options, double scale) {
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

}  // namespace

at::Tensor visible_keys(int64_t positions, const AttentionMask& mask, const at::Device& device) {
  return visible_between(0, positions, 0, positions, mask, device);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                     const AttentionOptions& options) {
  const int64_t t = q.size(-2);
  const bool causal_only = (mask.window == 0 || mask.window >= t) && !mask.documents.defined();
  if (causal_only && options.scale == 0 && options.softcap == 0) {
    return compat::causal_attention(q, k, v, options.dropout);
  }
  const double scale = options.scale != 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (mask.window == 0 || 2 * mask.window > t || t < kBlockedFrom) {
    return attend(q, k, v, visible_keys(t, mask, q.device()), options, scale);
  }
  // A window well inside a long sequence: queries a block at a time, each against the keys its block
  // sees (its own and the window before its first), so that the work grows as T x window, not T^2.
  const int64_t block = std::max(mask.window, kBlockQueries);
  std::vector<at::Tensor> blocks;
  for (int64_t start = 0; start < t; start += block) {
    const int64_t queries = std::min(block, t - start), key_start = std::max<int64_t>(0, start - mask.window + 1);
    const int64_t keys = start + queries - key_start;
    blocks.push_back(attend(q.narrow(-2, start, queries), k.narrow(-2, key_start, keys), v.narrow(-2, key_start, keys),
                            visible_between(start, queries, key_start, keys, mask, q.device()), options, scale));
  }
  return at::cat(blocks, -2);
}

}  // namespace basin::layers
