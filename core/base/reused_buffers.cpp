#include "basin/core/base/reused_buffers.h"

#include <ATen/ATen.h>

namespace basin {

void ReusedBuffers::match(const std::vector<at::Tensor>& like) {
  bool same = like.size() == sources_.size();
  // The same tensors, still shaped and placed alike: Module::to() keeps a
  // parameter's identity while changing its dtype or device.
  for (std::size_t i = 0; same && i < like.size(); ++i) {
    same = like[i].is_same(sources_[i]) && like[i].sizes() == buffers_[i].sizes() &&
           like[i].strides() == buffers_[i].strides() && like[i].dtype() == buffers_[i].dtype() &&
           like[i].device() == buffers_[i].device();
  }
  if (same) return;
  sources_ = like;
  buffers_.clear();
  for (const auto& t : like) buffers_.push_back(at::empty_like(t, at::MemoryFormat::Preserve));
}

}  // namespace basin
