#pragma once

#include <cstddef>
#include <functional>

#include <ATen/core/ivalue.h>

namespace basin {

/// Receives an archive's bytes in pieces, in order.
using ByteSink = std::function<void(const char* data, std::size_t size)>;

/// Writes `value` as the zip archive that torch.save and torch::pickle_save
/// write (each tensor's storage as data/<i>, then the pickle as data.pkl),
/// piece by piece into `sink`: no copy of the whole file is ever held, so
/// saving a model costs no memory of its size (pickle_save builds the file
/// in memory first: a 441 MB checkpoint was 400 MiB more on rank 0's peak).
/// type_tags: TorchScript's container type tags, as torch::pickle_save writes
/// them (basin's checkpoints, byte for byte); without them Python's
/// torch.load(weights_only=True) reads the file. Tensors are written from the CPU.
void write_torch_archive(const c10::IValue& value, bool type_tags, const ByteSink& sink);

}  // namespace basin
