#pragma once

#include "basin/core/base/reused_buffers.h"

namespace torch::nn { class Module; }

namespace basin {

/// An exact copy of a module's buffers (BatchNorm running mean, variance and
/// batch count), taken and put back without allocating after the first use.
///
/// SAM's descent pass runs the model forward a second time; without this,
/// BatchNorm would count that batch twice, and at the perturbed weights.
class BufferSnapshot {
 public:
  void take(torch::nn::Module& module);
  void restore();

 private:
  ReusedBuffers copies_;
};

}  // namespace basin
