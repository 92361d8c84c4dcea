#pragma once

#include <cstdint>

namespace basin {

/// One Adam update of `n` floats in place: m and v their moments (v_max the
/// running maximum under AMSGrad, else null). decay_l2 is Adam's weight
/// decay (added to the gradient), decay_decoupled AdamW's (1 - lr * wd
/// scales the weights first). `step` counts this update (1 for the first).
struct AdamUpdate {
  double lr, beta1, beta2, eps, decay_l2, decay_decoupled;
  int64_t step;
};
void adam_update(float* p, const float* g, float* m, float* v, float* v_max, int64_t n, const AdamUpdate& update);

}  // namespace basin
