#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace basin {

/// A file that is not an archive basin can read safely: the message says
/// which part of it is wrong.
class ArchiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One stored (uncompressed) entry of a zip archive, located in its bytes.
struct ZipEntry {
  std::string name;
  uint64_t offset = 0;  // of the entry's data
  uint64_t size = 0;
};

/// The entries of the zip archive in `bytes` (torch.save's and
/// torch::pickle_save's container), read from its central directory.
/// Throws ArchiveError unless every entry is stored uncompressed, as PyTorch
/// writes them, and lies wholly inside `bytes`: LibTorch's reader allocates
/// what an entry's header claims before it reads, so a crafted size would
/// cost gigabytes before the read fails.
std::vector<ZipEntry> read_zip_directory(std::string_view bytes);

}  // namespace basin
