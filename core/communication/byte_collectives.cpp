#include "basin/core/communication/byte_collectives.h"

#include <ATen/ATen.h>

#include "basin/core/communication/communicator.h"

namespace basin {

std::string broadcast_bytes(Communicator& communicator, const std::string& bytes, int root, c10::Device device) {
  // The size first, so receivers can allocate, then the bytes.
  const bool sender = communicator.rank() == root;
  std::vector<at::Tensor> size{at::full({1}, sender ? static_cast<int64_t>(bytes.size()) : 0, at::kLong).to(device)};
  communicator.broadcast(size, root);
  const int64_t n = size.front().item<int64_t>();
  if (n == 0) return {};
  std::vector<at::Tensor> data{sender ? at::from_blob(const_cast<char*>(bytes.data()), {n}, at::kByte).to(device)
                                      : at::empty({n}, at::TensorOptions(at::kByte).device(device))};
  communicator.broadcast(data, root);
  if (sender) return bytes;
  const at::Tensor host = data.front().cpu();
  return std::string(static_cast<const char*>(host.data_ptr()), static_cast<std::size_t>(n));
}

std::vector<std::string> gather_bytes(Communicator& communicator, const std::string& mine, int root,
                                      c10::Device device) {
  // One broadcast per rank: simple, and checkpoints are rare.
  std::vector<std::string> gathered;
  for (int rank = 0; rank < communicator.world_size(); ++rank) {
    std::string bytes = broadcast_bytes(communicator, mine, rank, device);
    if (communicator.rank() == root) gathered.push_back(std::move(bytes));
  }
  return gathered;
}

}  // namespace basin
