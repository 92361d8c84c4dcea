#pragma once

// Bounds for tests that compare a low-precision run (bf16, fp16) with one
// that computes the same thing in another order or precision. Each is
// derived from what it compares (the formats' rounding, the number of
// sums, the optimizer's steps), never picked because it passed on one
// machine: LibTorch computes bf16 on other kernels on other CPUs (some
// compute it natively), so only what holds for every rounding is a bound.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include <ATen/ATen.h>

namespace basin::test {

/// A floating format's rounding to nearest: it moves a value by at most
/// u |x| (the unit roundoff, half the epsilon) where x is normal, and by at
/// most eta (half the smallest subnormal) below.
struct FloatFormat {
  double u;
  double eta;
};
inline constexpr FloatFormat kFp32{0x1p-24, 0x1p-150};
inline constexpr FloatFormat kBf16{0x1p-8, 0x1p-134};
inline constexpr FloatFormat kFp16{0x1p-11, 0x1p-25};

/// Higham's gamma_n = n u / (1 - n u): n roundings of unit roundoff u
/// multiply a value by at most 1 + gamma_n (Accuracy and Stability of
/// Numerical Algorithms, lemma 3.1).
inline double rounding_gamma(int64_t n, double u) { return static_cast<double>(n) * u / (1 - static_cast<double>(n) * u); }

/// An addition of two `f` values as ATen does it on the CPU: in fp32, then
/// rounded to f (twice rounded where the fp32 sum was inexact): at most
/// (u + u32 + u u32) |a + b|. In fp32 itself: once, u32.
inline double addition_u(FloatFormat f) { return f.u == kFp32.u ? kFp32.u : f.u + kFp32.u * (1 + f.u); }

/// A sum of `terms` values in `f`, in any order (a ring, a tree, one after
/// another), each addition rounded: |computed - exact| <= gamma_{terms-1}
/// times the sum of the terms' magnitudes, plus eta for each addition
/// below the normal range (Higham, section 4.2). This is the factor of the
/// magnitudes; `sum_underflow` the rest.
inline double sum_error_factor(int64_t terms, FloatFormat f) { return rounding_gamma(terms - 1, addition_u(f)); }
inline double sum_underflow(int64_t terms, FloatFormat f) { return static_cast<double>(terms - 1) * f.eta; }

/// The most the update of one Adam step t (1, 2, ...) moves a weight, as a
/// multiple of lr (no weight decay). The step is lr m_hat / (sqrt(v_hat) +
/// eps) <= lr |m_hat| / sqrt(v_hat), with m_t = (1 - b1) sum_k b1^k g_{t-k}
/// and v_t = (1 - b2) sum_k b2^k g_{t-k}^2 over k < t. Cauchy-Schwarz on
/// sum_k (b1 / sqrt(b2))^k (sqrt(b2)^k |g_{t-k}|) gives
///   |m_hat| / sqrt(v_hat) <= c_t = (1 - b1) / (1 - b1^t) * sqrt(1 - b2^t) / sqrt(1 - b2)
///                                 * sqrt(sum_{k<t} (b1^2 / b2)^k),
/// whatever the gradients: 1 at t = 1, about 1.01 at t = 5 for the default
/// betas. Computed in fp32, m carries 3 roundings of 2^-24 a step, v 4
/// (their sqrt half of that), the step 8 more (the bias corrections, sqrt,
/// eps, the division, the product): 1 + gamma_{8t+16} covers them all.
inline double adam_step_factor(int64_t t, double beta1 = 0.9, double beta2 = 0.999) {
  double geometric = 0;
  for (int64_t k = 0; k < t; ++k) geometric += std::pow(beta1 * beta1 / beta2, static_cast<double>(k));
  const double c = (1 - beta1) / (1 - std::pow(beta1, static_cast<double>(t))) *
                   std::sqrt(1 - std::pow(beta2, static_cast<double>(t))) / std::sqrt(1 - beta2) * std::sqrt(geometric);
  return c * (1 + rounding_gamma(8 * t + 16, kFp32.u));
}

/// Two runs of `steps` Adam steps at `lr` from the same weights, whatever
/// their gradients (another order of sums, another precision): each ends
/// within sum_t lr c_t of the start, so the two within twice that, plus the
/// fp32 rounding of each step's w - update (u32 |w| a step, each run;
/// `largest_weight`, a bound on |w| at the end, plus the way moved bounds
/// |w| at every step).
inline double adam_runs_apart_bound(double lr, int64_t steps, double largest_weight, double beta1 = 0.9,
                                    double beta2 = 0.999) {
  double moved = 0;
  for (int64_t t = 1; t <= steps; ++t) moved += lr * adam_step_factor(t, beta1, beta2);
  return 2 * (moved + static_cast<double>(steps) * kFp32.u * (largest_weight + moved));
}

/// The largest |w| over every tensor of the runs given (a bound on |w| for
/// adam_runs_apart_bound).
inline double largest_weight(std::initializer_list<const std::vector<at::Tensor>*> runs) {
  double largest = 0;
  for (const auto* run : runs) {
    for (const auto& w : *run) largest = std::max(largest, w.abs().max().item<double>());
  }
  return largest;
}

}  // namespace basin::test
