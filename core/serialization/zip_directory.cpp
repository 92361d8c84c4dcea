#include "basin/core/serialization/zip_directory.h"

#include <algorithm>
#include <limits>

namespace basin {

namespace {

// Record signatures and fixed sizes from the ZIP application note (APPNOTE 6.3).
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndLocator = 0x07064b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr uint32_t kDirectoryHeader = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint64_t kEndOfDirectorySize = 22;
constexpr uint64_t kDirectoryHeaderSize = 46;
constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint16_t kZip64ExtraId = 0x0001;

// Little-endian reads that refuse to leave the archive.
class Bytes {
 public:
  explicit Bytes(std::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const { return bytes_.size(); }

  bool fits(uint64_t at, uint64_t n) const { return at <= size() && n <= size() - at; }

  uint64_t read(uint64_t at, int width, const char* what) const {
    if (!fits(at, static_cast<uint64_t>(width))) throw ArchiveError(std::string("the zip's ") + what + " lies past its end");
    uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i) value = value << 8 | static_cast<uint8_t>(bytes_[at + static_cast<uint64_t>(i)]);
    return value;
  }
  std::string_view view(uint64_t at, uint64_t n, const char* what) const {
    if (!fits(at, n)) throw ArchiveError(std::string("the zip's ") + what + " lies past its end");
    return bytes_.substr(at, n);
  }

 private:
  std::string_view bytes_;
};

struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

Directory find_directory(const Bytes& zip) {
  if (zip.size() < kEndOfDirectorySize) throw ArchiveError("too short to be a zip archive");
  // The end record sits at the end, before a comment of at most 64 KiB.
  const uint64_t last = zip.size() - kEndOfDirectorySize;
  const uint64_t first = last > 0xFFFF ? last - 0xFFFF : 0;
  for (uint64_t at = last + 1; at-- > first;) {
    if (zip.read(at, 4, "end record") != kEndOfDirectory) continue;
    Directory directory{zip.read(at + 10, 2, "end record"), zip.read(at + 16, 4, "end record"),
                        zip.read(at + 12, 4, "end record")};
    // PyTorch writes ZIP64 records; their locator sits just before the end record.
    if (at >= 20 && zip.read(at - 20, 4, "ZIP64 locator") == kZip64EndLocator) {
      const uint64_t end64 = zip.read(at - 12, 8, "ZIP64 locator");
      if (zip.read(end64, 4, "ZIP64 end record") != kZip64End) throw ArchiveError("the zip's ZIP64 end record is damaged");
      directory = {zip.read(end64 + 32, 8, "ZIP64 end record"), zip.read(end64 + 48, 8, "ZIP64 end record"),
                   zip.read(end64 + 40, 8, "ZIP64 end record")};
    }
    if (!zip.fits(directory.offset, directory.size) ||
        directory.entries > directory.size / kDirectoryHeaderSize) {
      throw ArchiveError("the zip's central directory lies outside the file");
    }
    return directory;
  }
  throw ArchiveError("not a zip archive (no end of central directory record)");
}

// A ZIP64 extra field holds, in this order, the 64-bit values of the fields
// whose 32-bit slot reads 0xFFFFFFFF.
void read_zip64_extra(const Bytes& zip, uint64_t extra, uint64_t extra_size, uint64_t* fields[3]) {
  for (uint64_t at = extra; at + 4 <= extra + extra_size;) {
    const uint64_t id = zip.read(at, 2, "extra field");
    const uint64_t size = zip.read(at + 2, 2, "extra field");
    if (id == kZip64ExtraId) {
      uint64_t next = at + 4;
      for (int i = 0; i < 3; ++i) {
        if (*fields[i] != 0xFFFFFFFF) continue;
        if (next + 8 > at + 4 + size) throw ArchiveError("the zip's ZIP64 extra field is too short");
        *fields[i] = zip.read(next, 8, "ZIP64 extra field");
        next += 8;
      }
      return;
    }
    at += 4 + size;
  }
}

}  // namespace

std::vector<ZipEntry> read_zip_directory(std::string_view bytes) {
  const Bytes zip(bytes);
  const Directory directory = find_directory(zip);
  std::vector<ZipEntry> entries;
  entries.reserve(directory.entries);
  uint64_t at = directory.offset;
  for (uint64_t i = 0; i < directory.entries; ++i) {
    if (zip.read(at, 4, "central directory") != kDirectoryHeader) {
      throw ArchiveError("the zip's central directory is damaged at entry " + std::to_string(i));
    }
    const uint64_t method = zip.read(at + 10, 2, "central directory");
    uint64_t compressed = zip.read(at + 20, 4, "central directory");
    uint64_t size = zip.read(at + 24, 4, "central directory");
    const uint64_t name_size = zip.read(at + 28, 2, "central directory");
    const uint64_t extra_size = zip.read(at + 30, 2, "central directory");
    const uint64_t comment_size = zip.read(at + 32, 2, "central directory");
    uint64_t local = zip.read(at + 42, 4, "central directory");
    ZipEntry entry;
    entry.name = std::string(zip.view(at + kDirectoryHeaderSize, name_size, "entry name"));
    uint64_t* wide[3] = {&size, &compressed, &local};
    read_zip64_extra(zip, at + kDirectoryHeaderSize + name_size, extra_size, wide);
    at += kDirectoryHeaderSize + name_size + extra_size + comment_size;

    if (method != 0 || compressed != size) {
      throw ArchiveError("zip entry '" + entry.name + "' is compressed (method " + std::to_string(method) +
                         "); PyTorch stores its entries uncompressed");
    }
    if (zip.read(local, 4, "local header") != kLocalHeader) {
      throw ArchiveError("zip entry '" + entry.name + "' has no local header where the directory says");
    }
    entry.offset = local + kLocalHeaderSize + zip.read(local + 26, 2, "local header") + zip.read(local + 28, 2, "local header");
    entry.size = size;
    if (!zip.fits(entry.offset, entry.size)) {
      throw ArchiveError("zip entry '" + entry.name + "' claims " + std::to_string(size) + " bytes past the end of the " +
                         std::to_string(zip.size()) + "-byte file");
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

}  // namespace basin
