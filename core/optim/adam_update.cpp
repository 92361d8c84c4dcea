// The fused Adam update's loop (fused_adam.h), apart from LibTorch's big
// headers: it compiles with -fno-math-errno (see CMakeLists.txt), so that
// the compiler turns sqrt into an instruction and vectorizes the loop.
#include "basin/core/optim/adam_update.h"

#include <cmath>

#include <ATen/Parallel.h>

namespace basin {

void adam_update(float* p, const float* g, float* m, float* v, float* v_max, int64_t n, const AdamUpdate& u) {
  // LibTorch's step: bias corrections in double, the step size and the
  // denominator's divisor then rounded to float as its scalar arguments are.
  const double correction1 = 1 - std::pow(u.beta1, static_cast<double>(u.step));
  const double correction2 = 1 - std::pow(u.beta2, static_cast<double>(u.step));
  const auto b1 = static_cast<float>(u.beta1), b2 = static_cast<float>(u.beta2);
  const auto c1 = static_cast<float>(1 - u.beta1), c2 = static_cast<float>(1 - u.beta2);
  const auto step_size = static_cast<float>(u.lr / correction1);
  const auto root_correction2 = static_cast<float>(std::sqrt(correction2));
  const auto eps = static_cast<float>(u.eps), l2 = static_cast<float>(u.decay_l2);
  const auto shrink = static_cast<float>(1 - u.lr * u.decay_decoupled);
  const bool decoupled = u.decay_decoupled != 0;
  // Each chunk is one pass the compiler vectorizes (this file builds with -fno-math-errno, so sqrt is an instruction).
  at::parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float w = p[i];
      if (decoupled) w *= shrink;
      const float grad = l2 != 0 ? g[i] + l2 * w : g[i];  // as LibTorch's grad.add(p, weight_decay)
      const float mi = m[i] * b1 + c1 * grad;               // exp_avg.mul_(beta1).add_(grad, 1 - beta1)
      const float vi = v[i] * b2 + c2 * grad * grad;        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
      m[i] = mi;
      v[i] = vi;
      float second = vi;
      if (v_max != nullptr) {
        second = v_max[i] > vi ? v_max[i] : vi;
        v_max[i] = second;
      }
      p[i] = w - step_size * (mi / (std::sqrt(second) / root_correction2 + eps));
    }
  });
}

}  // namespace basin
