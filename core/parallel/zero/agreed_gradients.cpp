#include "basin/core/parallel/zero/agreed_gradients.h"

#include <ATen/ATen.h>

#include "basin/core/communication/communicator.h"

namespace basin {

std::vector<at::Tensor> agreed_gradients(const std::vector<at::Tensor>& params, Communicator& communicator) {
  if (params.empty()) return {};
  std::vector<uint8_t> defined(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) defined[i] = params[i].grad().defined() ? 1 : 0;
  // On the parameters' device: NCCL takes CUDA tensors only.
  std::vector<at::Tensor> mask{at::tensor(at::ArrayRef<uint8_t>(defined), at::kByte).to(params.front().device())};
  communicator.all_reduce_max(mask);
  const at::Tensor anywhere = mask.front().cpu();
  const uint8_t* flags = anywhere.data_ptr<uint8_t>();

  std::vector<at::Tensor> grads(params.size());
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (flags[i] == 0) continue;
    at::Tensor param = params[i];
    if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
    grads[i] = param.grad();
  }
  return grads;
}

}  // namespace basin
