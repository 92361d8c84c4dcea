#pragma once

#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace basin {

class Communicator;

/// Every rank's `mine` gathered on `root`, indexed by rank; the other ranks
/// get an empty vector. Sizes may differ by rank. `device` is where the
/// bytes travel (NCCL takes CUDA tensors only).
std::vector<std::string> gather_bytes(Communicator& communicator, const std::string& mine, int root,
                                      c10::Device device);

/// `root`'s `bytes` on every rank (the others' argument is ignored).
std::string broadcast_bytes(Communicator& communicator, const std::string& bytes, int root, c10::Device device);

}  // namespace basin
