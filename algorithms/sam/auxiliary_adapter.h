#pragma once

#include <memory>

#include "basin/core/model/layer_perturbation.h"

namespace basin {

/// Bi-LoRA's second low-rank adapter on one adapted layer, which models
/// SAM's perturbation of W by gradient ascent: while `*armed`, a training
/// forward adds scaling * x A^T B^T (on the layer's input, as a change to W
/// would). Bi-LoRA trains and saves it; no optimizer steps it.
struct AuxiliaryAdapter : LayerPerturbation, LayerPerturbation::LowRank {
  std::shared_ptr<const bool> armed;  // the same flag on every layer, for this step's pass alone

  bool active() const override { return *armed; }
  const LayerPerturbation::LowRank* low_rank() const override { return this; }
};

}  // namespace basin
