#pragma once

#include <vector>

#include <ATen/core/ivalue.h>

namespace basin {

/// What torch::jit::pickle_load does (the IValue in the bytes of a file that
/// torch::pickle_save or Python's torch.save wrote), made safe for bytes from
/// anywhere. Before LibTorch reads them: every zip entry must lie inside the
/// bytes (read_zip_directory) and the pickle must claim no more than the file
/// holds (check_pickle). Then LibTorch's unpickler reads the checked program
/// and the checked entries (never the zip itself); after it, every tensor
/// must lie inside its storage. A Python state_dict (an OrderedDict) comes
/// back as a plain dict; tensors come back on the CPU.
///
/// Throws ArchiveError for what basin's checks refuse and c10::Error for what
/// LibTorch refuses; both name what is wrong.
c10::IValue safe_pickle_load(const std::vector<char>& bytes);

}  // namespace basin
