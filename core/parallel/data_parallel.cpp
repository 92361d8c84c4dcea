#include "basin/core/parallel/data_parallel.h"

#include <map>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "basin/core/parallel/agreed_gradients.h"
#include "basin/core/parallel/communicator.h"
#include "basin/core/parallel/flat_tensors.h"

namespace basin {

DataParallel::DataParallel(std::shared_ptr<Communicator> communicator, int64_t bucket_bytes)
    : communicator_(std::move(communicator)), bucket_bytes_(bucket_bytes) {}

void DataParallel::broadcast_model(torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (const auto& p : model.parameters()) tensors.push_back(p.detach());
  for (const auto& b : model.buffers()) tensors.push_back(b);
  communicator_->broadcast(tensors, 0);
}

void DataParallel::broadcast_buffers(torch::nn::Module& model) {
  const auto buffers = model.buffers();
  if (buffers.empty() || communicator_->world_size() == 1) return;
  at::NoGradGuard no_grad;
  // Buffers mix dtypes (BatchNorm's batch count is int64): one broadcast per dtype.
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& b : buffers) by_dtype[b.scalar_type()].push_back(b);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> flat{at::flatten_dense_tensors(group)};
    communicator_->broadcast(flat, 0);
    copy_from_flat(flat.front(), group);
  }
}

void DataParallel::average_gradients(const std::vector<at::Tensor>& params) {
  if (communicator_->world_size() == 1) return;
  std::vector<at::Tensor> grads;
  for (const auto& g : agreed_gradients(params, *communicator_)) {
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return;
  at::NoGradGuard no_grad;
  const double world = static_cast<double>(communicator_->world_size());
  // Buckets of same-dtype, same-device gradients, flattened into one tensor each.
  std::size_t begin = 0;
  while (begin < grads.size()) {
    std::size_t end = begin;
    int64_t bytes = 0;
    while (end < grads.size() && grads[end].scalar_type() == grads[begin].scalar_type() &&
           grads[end].device() == grads[begin].device() && (end == begin || bytes < bucket_bytes_)) {
      bytes += grads[end].numel() * static_cast<int64_t>(grads[end].element_size());
      ++end;
    }
    const at::TensorList members = at::TensorList(grads).slice(begin, end - begin);
    std::vector<at::Tensor> bucket{at::flatten_dense_tensors(members)};
    communicator_->all_reduce_sum(bucket);
    bucket.front().div_(world);
    copy_from_flat(bucket.front(), members);
    begin = end;
  }
}

}  // namespace basin
