#pragma once

#include <ATen/core/Tensor.h>

namespace basin {

class AdaptableLinear;

/// What an algorithm adds to an adapted layer's training forward, set on
/// the layer by the algorithm that owns it (Flat-LoRA's noise on the frozen
/// weight, Bi-LoRA's auxiliary adapter): the layer asks it what to add,
/// never which algorithm it is. Not a submodule: no optimizer steps it, no
/// export or state_dict holds it; its owner trains and saves what it keeps.
class LayerPerturbation {
 public:
  virtual ~LayerPerturbation() = default;

  /// Whether it changes this forward (its owner arms it for its pass
  /// alone). Asked in training only, and never of a merged layer.
  virtual bool active() const = 0;
  /// x W^T (+ b) as perturbed, in place of the layer's own product; undefined
  /// where it leaves that product alone.
  virtual at::Tensor base_output(const AdaptableLinear& /*layer*/, const at::Tensor& /*x*/) const { return {}; }

  /// A low-rank term scaling * x A^T B^T on the layer's input, as a change
  /// to W would add: A [r, in], B [out, r]. The layer runs it in one
  /// product with its own adapter where both see x alike.
  struct LowRank {
    at::Tensor A, B;
    double scaling = 1;
  };
  /// The term it adds, or null for none.
  virtual const LowRank* low_rank() const { return nullptr; }
};

}  // namespace basin
