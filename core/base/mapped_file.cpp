#include "basin/core/base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace basin {

namespace {

// A read faults in the pages it touches, and the kernel maps more around
// them (fault-around, and whole large folios of the page cache, up to
// 2 MiB): measured at 1 to 2 MiB held per read at random from a 1.8 GB
// file. Releasing whole 2 MiB spans hands all of that back.
constexpr int64_t kFolio = int64_t{2} << 20;

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& file, Access access) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot read '" + file.string() + "': " + std::strerror(errno));
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    const int error = errno;
    ::close(fd);
    throw std::runtime_error("cannot read '" + file.string() + "': " + std::strerror(error));
  }
  if (!S_ISREG(status.st_mode)) {
    ::close(fd);
    throw std::runtime_error("'" + file.string() + "' is not a regular file (a pipe, a device?): it is mapped as it lies on disk");
  }
  bytes_ = static_cast<int64_t>(status.st_size);
  if (bytes_ == 0) {
    ::close(fd);
    return;
  }
  const bool shared = access == Access::kReadOnly;
  void* at = ::mmap(nullptr, static_cast<std::size_t>(bytes_), shared ? PROT_READ : PROT_READ | PROT_WRITE,
                    // NORESERVE: a private mapping is not charged the whole file up front, only the pages written
                    shared ? MAP_SHARED : MAP_PRIVATE | MAP_NORESERVE, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping keeps the file
  if (at == MAP_FAILED) {
    // ENOMEM with memory to spare: each file is one mapping, and a process may hold vm.max_map_count of them.
    throw std::runtime_error("cannot map '" + file.string() + "': " + std::strerror(error) +
                             (error == ENOMEM ? " (one mapping per file: see sysctl vm.max_map_count, or join small "
                                                "files; under strict overcommit, vm.overcommit_memory)" : ""));
  }
  data_ = static_cast<uint8_t*>(at);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, static_cast<std::size_t>(bytes_));
}

bool MappedFile::holds(const void* at, int64_t bytes) const {
  const auto* start = static_cast<const uint8_t*>(at);
  return data_ != nullptr && bytes >= 0 && start >= data_ && start - data_ <= bytes_ - bytes;
}

void MappedFile::expect_random_reads() const {
  if (data_ != nullptr) ::madvise(data_, static_cast<std::size_t>(bytes_), MADV_RANDOM);
}

void MappedFile::release(const void* at, int64_t bytes) const {
  if (bytes <= 0 || !holds(at, bytes)) return;
  static const auto page = static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  const int64_t offset = static_cast<const uint8_t*>(at) - data_;  // folios sit at file offsets that are multiples of their size
  const int64_t first = offset / kFolio * kFolio;
  const int64_t last = std::min((offset + bytes + kFolio - 1) / kFolio * kFolio, (bytes_ + page - 1) / page * page);
  ::madvise(data_ + first, static_cast<std::size_t>(last - first), MADV_DONTNEED);
}

}  // namespace basin
