#pragma once

#include <cstdint>
#include <filesystem>

namespace basin {

/// A file mapped into the process as it lies on disk: a page comes in when
/// it is read and counts toward the process's memory only while it stays
/// mapped, so a process can read a file far larger than its memory a piece
/// at a time (token corpora, checkpoints being resharded).
class MappedFile {
 public:
  enum class Access {
    kReadOnly,     // shared and read-only: a write faults; release() never loses anything
    kCopyOnWrite,  // private: a write copies the page into the process, the file never changes
  };

  /// Maps `file` (a regular file; an empty one maps nothing). The file must
  /// not shrink while mapped: a read past its new end is SIGBUS, as is an
  /// I/O error under a read. Throws
  /// std::runtime_error naming the file and the system's reason: missing,
  /// not regular (a pipe), or refused (ENOMEM names vm.max_map_count, since
  /// each file is one mapping).
  MappedFile(const std::filesystem::path& file, Access access);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  /// Whether [at, at + bytes) lies in the mapping.
  bool holds(const void* at, int64_t bytes) const;

  /// Tells the kernel reads come in no order (no read-ahead).
  void expect_random_reads() const;

  /// Hands back the pages holding [at, at + bytes), rounded out to the 2 MiB
  /// spans the kernel maps around a read; a range outside the mapping is
  /// ignored. The pages stay in the page cache and a later read refaults
  /// them. On a kCopyOnWrite mapping this drops what was written to those
  /// pages, and the span rounds out to neighbouring data: call it only on a
  /// mapping nothing was written to.
  void release(const void* at, int64_t bytes) const;

 private:
  uint8_t* data_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace basin
