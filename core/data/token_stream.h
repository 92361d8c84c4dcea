#pragma once

// One stream of token ids, read by position: a corpus's files memory-mapped
// as they lie on disk (bytes, or uint16/uint32 ids), or ids held in memory
// (a tokenized text, a torch.save'd tensor), joined in order. A read copies
// the ids asked for, widened to int64, so a window may straddle two files.
// What a read pulled into the process from a mapping is handed back to the
// page cache once the ids are copied: a rank's resident memory does not grow
// with the corpus, however long it trains.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace basin {

/// How ids are stored: raw files hold little-endian bytes, uint16 or uint32.
enum class TokenType { kUint8, kUint16, kUint32, kInt32 };

class TokenStream {
 public:
  /// Appends `file`'s ids, mapped read-only. A std::runtime_error names the
  /// file when it cannot be mapped, or does not hold whole ids of `type`.
  void append_file(const std::filesystem::path& file, TokenType type);
  /// Appends ids held in memory (a 1-D integer tensor, copied as int32).
  void append(const at::Tensor& ids);

  int64_t size() const { return size_; }
  /// Ids [begin, end) of this stream, sharing its files and memory.
  TokenStream slice(int64_t begin, int64_t end) const;
  /// Ids [begin, begin + count) into `out`, as int64.
  void read(int64_t begin, int64_t count, int64_t* out) const;

  /// Bytes of ids held in memory (not mapped), and of files mapped.
  int64_t held_bytes() const;
  int64_t mapped_bytes() const;

 private:
  struct Piece;
  std::vector<std::shared_ptr<const Piece>> pieces_;
  std::vector<int64_t> starts_;  // each piece's first position, in the pieces' whole
  int64_t total_ = 0;  // the pieces' whole
  int64_t offset_ = 0;  // this stream's first position in the whole
  int64_t size_ = 0;
};

}  // namespace basin
