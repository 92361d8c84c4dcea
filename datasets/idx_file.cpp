#include "basin/datasets/idx_file.h"

#include <zlib.h>

#include <memory>
#include <stdexcept>

#include <ATen/ATen.h>

namespace basin {

namespace {

// IDX magic: two zero bytes, the element type, then the number of dimensions.
constexpr unsigned char kUnsignedByte = 0x08;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

void read_exactly(gzFile file, void* buffer, std::size_t size, const std::string& path) {
  auto* out = static_cast<unsigned char*>(buffer);
  while (size > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(size, 1u << 30));
    const int got = gzread(file, out, chunk);
    if (got <= 0) throw std::runtime_error("IDX file '" + path + "' is truncated or corrupt");
    out += got;
    size -= static_cast<std::size_t>(got);
  }
}

uint32_t big_endian(const unsigned char* bytes) {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) | uint32_t{bytes[3]};
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

at::Tensor read_idx_file(const std::string& path) {
  // gzread reads plain files too, so one code path serves both.
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) throw std::runtime_error("IDX file '" + path + "' cannot be opened");
  unsigned char magic[4];
  read_exactly(file.get(), magic, 4, path);
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != kUnsignedByte || magic[3] == 0) {
    throw std::runtime_error("IDX file '" + path + "' has no unsigned-byte IDX header");
  }
  std::vector<int64_t> dims(magic[3]);
  int64_t count = 1;
  for (auto& dim : dims) {
    unsigned char bytes[4];
    read_exactly(file.get(), bytes, 4, path);
    dim = big_endian(bytes);
    count *= dim;
  }
  at::Tensor data = at::empty(dims, at::kByte);
  read_exactly(file.get(), data.data_ptr<uint8_t>(), static_cast<std::size_t>(count), path);
  unsigned char extra;
  if (gzread(file.get(), &extra, 1) != 0) {
    throw std::runtime_error("IDX file '" + path + "' has data past the size its header gives");
  }
  return data;
}

void write_idx_file(const std::string& path, const at::Tensor& data) {
  const at::Tensor bytes = data.to(at::kByte).contiguous();
  GzFile file(gzopen(path.c_str(), ends_with(path, ".gz") ? "wb" : "wbT"));
  if (!file) throw std::runtime_error("cannot write IDX file '" + path + "'");
  std::vector<unsigned char> header = {0, 0, kUnsignedByte, static_cast<unsigned char>(bytes.dim())};
  for (int64_t dim : bytes.sizes()) {
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<unsigned char>(dim >> shift));
  }
  gzwrite(file.get(), header.data(), static_cast<unsigned>(header.size()));
  if (bytes.numel() > 0) gzwrite(file.get(), bytes.data_ptr<uint8_t>(), static_cast<unsigned>(bytes.numel()));
}

}  // namespace basin
