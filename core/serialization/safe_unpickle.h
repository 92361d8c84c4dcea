#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
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

class MappedFile;
/// The same of a mapped file (MappedFile::Access::kCopyOnWrite): each
/// tensor's storage views the mapping where the archive aligned its record
/// (PyTorch's writer always does), so loading reads only the pickle, and a
/// tensor's pages come in when it is read. The mapping lives while any
/// storage views it.
c10::IValue safe_pickle_load(const std::shared_ptr<const MappedFile>& file);

/// Hands back the pages of `tensor`'s storage when it views a mapping
/// (MappedFile::release); does nothing for any other tensor. What was
/// written to those pages, or to any tensor of the same file near them, is
/// lost: call it only where no tensor of that file was written, as a reader
/// done with a piece of a large file it loaded itself.
void release_mapped_pages(const at::Tensor& tensor);

}  // namespace basin
