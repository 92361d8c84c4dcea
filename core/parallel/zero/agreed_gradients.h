#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace basin {

class Communicator;

/// The gradients of `params` that ranks sync, one per parameter, the same
/// layout on every rank. A parameter that took no part in this rank's passes
/// (an unused branch; LibTorch 2.x's zero_grad leaves gradients undefined)
/// gets a zero gradient here when another rank has one, so that every rank
/// contributes the same tensors to the collectives; one that has a gradient
/// on no rank stays undefined (an undefined entry). Costs one all-reduce of a
/// byte per parameter. `params`: the same tensors, in the same order, on
/// every rank, each once.
std::vector<at::Tensor> agreed_gradients(const std::vector<at::Tensor>& params, Communicator& communicator);

}  // namespace basin
