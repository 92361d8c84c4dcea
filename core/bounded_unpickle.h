#pragma once

#include <vector>

#include <ATen/core/ivalue.h>

namespace basin {

/// What torch::jit::pickle_load does — the IValue in bytes from
/// torch::pickle_save or Python's torch.save — but safe on hostile bytes:
/// LibTorch's own reader copies whatever range the zip's headers name, past
/// the end of the buffer (found by fuzzing checkpoint loading), while this
/// one refuses reads outside it, which LibTorch then reports as an error.
/// Throws what LibTorch throws (c10::Error) for bytes that are not such a file.
c10::IValue bounded_pickle_load(const std::vector<char>& bytes);

}  // namespace basin
