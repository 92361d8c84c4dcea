#include "basin/core/parallel/ddp/data_parallel.h"

#include <map>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "basin/core/communication/communicator.h"
#include "basin/core/communication/flat_tensors.h"

namespace basin {

DataParallel::DataParallel(std::shared_ptr<Communicator> communicator) : communicator_(std::move(communicator)) {}

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

}  // namespace basin
