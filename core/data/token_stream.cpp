#include "basin/core/data/token_stream.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/base/mapped_file.h"

namespace basin {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "mapped token files are read as little-endian ids");

namespace {

int bytes_per_id(TokenType type) {
  switch (type) {
    case TokenType::kUint8: return 1;
    case TokenType::kUint16: return 2;
    case TokenType::kUint32:
    case TokenType::kInt32: return 4;
  }
  return 1;
}

}  // namespace

// Each read of a mapped piece hands back the pages it touched (MappedFile::release),
// so a process holds no more of a corpus than it is reading.

struct TokenStream::Piece {
  TokenType type = TokenType::kInt32;
  int64_t count = 0;
  const uint8_t* data = nullptr;
  std::shared_ptr<const MappedFile> mapping;  // a mapped file, or
  at::Tensor held;  // ids in memory

  void read(int64_t begin, int64_t n, int64_t* out) const {
    const uint8_t* at = data + begin * bytes_per_id(type);
    switch (type) {
      case TokenType::kUint8: std::copy(at, at + n, out); break;
      case TokenType::kUint16: {
        const auto* ids = reinterpret_cast<const uint16_t*>(at);
        std::copy(ids, ids + n, out);
        break;
      }
      case TokenType::kUint32: {
        const auto* ids = reinterpret_cast<const uint32_t*>(at);
        std::copy(ids, ids + n, out);
        break;
      }
      case TokenType::kInt32: {
        const auto* ids = reinterpret_cast<const int32_t*>(at);
        std::copy(ids, ids + n, out);
        break;
      }
    }
    if (mapping) mapping->release(at, n * bytes_per_id(type));
  }
};

void TokenStream::append_file(const std::filesystem::path& file, TokenType type) {
  auto mapping = std::make_shared<const MappedFile>(file, MappedFile::Access::kReadOnly);
  mapping->expect_random_reads();  // windows are read in shuffled order
  const int width = bytes_per_id(type);
  if (mapping->bytes() % width != 0) {
    throw std::runtime_error("'" + file.string() + "' holds " + std::to_string(mapping->bytes()) +
                             " bytes, no whole number of " + std::to_string(width) + "-byte ids");
  }
  auto piece = std::make_shared<Piece>();
  piece->type = type;
  piece->count = mapping->bytes() / width;
  piece->data = mapping->data();
  piece->mapping = std::move(mapping);
  starts_.push_back(total_);
  total_ += piece->count;
  size_ = total_ - offset_;
  pieces_.push_back(std::move(piece));
}

void TokenStream::append(const at::Tensor& ids) {
  if (!at::isIntegralType(ids.scalar_type(), /*includeBool=*/false) || ids.dim() != 1) {
    throw std::invalid_argument("TokenStream::append: a 1-D integer tensor of ids expected");
  }
  auto piece = std::make_shared<Piece>();
  piece->held = ids.to(at::kInt, /*non_blocking=*/false, /*copy=*/true).contiguous();  // owned, whoever holds `ids`
  piece->count = piece->held.numel();
  piece->data = reinterpret_cast<const uint8_t*>(piece->held.data_ptr<int32_t>());
  starts_.push_back(total_);
  total_ += piece->count;
  size_ = total_ - offset_;
  pieces_.push_back(std::move(piece));
}

TokenStream TokenStream::slice(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > size_) {
    throw std::out_of_range("TokenStream::slice: [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of " + std::to_string(size_) + " ids");
  }
  TokenStream part = *this;
  part.offset_ = offset_ + begin;
  part.size_ = end - begin;
  return part;
}

void TokenStream::read(int64_t begin, int64_t count, int64_t* out) const {
  if (begin < 0 || count < 0 || begin + count > size_) {
    throw std::out_of_range("TokenStream::read: [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                            ") of " + std::to_string(size_) + " ids");
  }
  int64_t position = offset_ + begin;
  // The last piece starting at or before the position (empty files give pieces of no ids, skipped here).
  auto piece = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), position) - starts_.begin() - 1);
  while (count > 0) {
    const Piece& from = *pieces_[piece];
    const int64_t within = position - starts_[piece];
    const int64_t n = std::min(count, from.count - within);
    if (n > 0) {
      from.read(within, n, out);
      out += n;
      position += n;
      count -= n;
    }
    ++piece;
  }
}

int64_t TokenStream::held_bytes() const {
  int64_t bytes = 0;
  for (const auto& piece : pieces_) bytes += piece->held.defined() ? piece->held.nbytes() : 0;
  return bytes;
}

int64_t TokenStream::mapped_bytes() const {
  int64_t bytes = 0;
  for (const auto& piece : pieces_) bytes += piece->mapping ? piece->mapping->bytes() : 0;
  return bytes;
}

}  // namespace basin
