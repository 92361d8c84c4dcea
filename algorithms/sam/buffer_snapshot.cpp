#include "basin/algorithms/sam/buffer_snapshot.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace basin {

void BufferSnapshot::take(torch::nn::Module& module) {
  at::NoGradGuard no_grad;
  copies_.match(module.buffers(/*recurse=*/true));
  for (std::size_t i = 0; i < copies_.sources().size(); ++i) copies_.buffers()[i].copy_(copies_.sources()[i]);
}

void BufferSnapshot::restore() {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < copies_.sources().size(); ++i) {
    copies_.sources()[i].copy_(copies_.buffers()[i]);  // in-place ops are const on a Tensor handle
  }
}

}  // namespace basin
