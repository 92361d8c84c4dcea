#pragma once

// The language models' attention: softmax(q k^T · scale) v over the keys a
// query may see, which the causal mask limits to its past, a window limits
// to its last `window` positions, and document ids (packed sequences)
// limit to its own document. Gemma 2 soft-caps the scores first.
//
// What runs: the plain causal product (compat::causal_attention, LibTorch's
// fused kernels from 2.0) when nothing narrows the mask below the causal
// one (a window at least as long as the sequence is none: the same bits);
// LibTorch's at::scaled_dot_product_attention with the mask from 2.1, where
// there is no soft-cap; else the product written out, softmax in fp32 (the
// only path on Debian's 1.13, which has no fused attention). A window of at
// most half a sequence of 256 positions or more runs a block of
// max(window, 128) queries at a time against the keys the block sees, so
// that its cost grows as T x window rather than T^2
// (bench/attention_bench.cpp).
#include <cstdint>

#include <ATen/ATen.h>

namespace basin::layers {

/// Which keys each query sees beyond the causal past.
struct AttentionMask {
  int64_t window = 0;    // a query at t sees keys past t - window; 0: all of its past
  at::Tensor documents;  // [n, T] integer ids: a query sees keys of its own id alone; undefined: one document
};

struct AttentionOptions {
  double scale = 0;    // 0: 1 / sqrt(head_dim)
  double softcap = 0;  // scores become softcap · tanh(scores / softcap); 0: none
  double dropout = 0;  // on the weights, while training
};

/// The keys each query sees: [n or 1, 1, T, T], true where query t may read key s.
at::Tensor visible_keys(int64_t positions, const AttentionMask& mask, const at::Device& device);

/// q [n, heads, T, d], k and v as many heads (grouped heads repeated by the caller).
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                     const AttentionOptions& options);

}  // namespace basin::layers
