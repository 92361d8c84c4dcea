#include "basin/algorithms/buffer_snapshot.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace basin {

void BufferSnapshot::take(torch::nn::Module& module) {
  at::NoGradGuard no_grad;
  auto buffers = module.buffers(/*recurse=*/true);
  bool same = buffers.size() == buffers_.size();
  for (std::size_t i = 0; same && i < buffers.size(); ++i) same = buffers[i].is_same(buffers_[i]);
  if (!same) {
    buffers_ = buffers;
    copies_.clear();
    for (const auto& b : buffers_) copies_.push_back(at::empty_like(b, at::MemoryFormat::Preserve));
  }
  for (std::size_t i = 0; i < buffers_.size(); ++i) copies_[i].copy_(buffers_[i]);
}

void BufferSnapshot::restore() {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(copies_[i]);
}

}  // namespace basin
