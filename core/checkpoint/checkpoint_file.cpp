#include "basin/core/checkpoint/checkpoint_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <utility>

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include "basin/core/base/mapped_file.h"
#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/serialization/archive_writer.h"
#include "basin/core/serialization/safe_unpickle.h"

namespace fs = std::filesystem;

namespace basin {

namespace {

const std::regex kCheckpointName(R"(step-(\d{12})\.pt)");

std::string system_reason() { return std::strerror(errno); }

// zlib takes at most uInt bytes per call.
uLong crc32_update(uLong crc, const char* data, std::size_t size) {
  for (std::size_t offset = 0; offset < size;) {
    const auto n = static_cast<uInt>(std::min<std::size_t>(size - offset, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data + offset), n);
    offset += n;
  }
  return crc;
}

std::string hex(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

// What write_atomically wrote: its size and CRC-32.
struct Written {
  std::size_t bytes = 0;
  uint32_t crc = 0;
};

// The temporary file a checkpoint is written to: closed exactly once (a second
// close could hit a descriptor another thread has since opened), and removed
// unless it was renamed into place.
class TemporaryFile {
 public:
  explicit TemporaryFile(fs::path path)
      : path_(std::move(path)), fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    close();
    if (!renamed_ && opened_) ::unlink(path_.c_str());
  }

  int fd() const { return fd_; }
  bool close() { return fd_ < 0 || ::close(std::exchange(fd_, -1)) == 0; }
  bool rename_to(const fs::path& target) { return renamed_ = ::rename(path_.c_str(), target.c_str()) == 0; }

 private:
  fs::path path_;
  int fd_;
  bool opened_ = fd_ >= 0;
  bool renamed_ = false;
};

// Writes what `produce` hands its sink to `path` through a temporary file:
// written, fsynced, renamed; nothing of it is left behind if anything fails.
Written write_atomically(const fs::path& path, const std::function<void(const ByteSink&)>& produce) {
  TemporaryFile file(path.string() + ".tmp");
  // errno is read before the file is closed and removed, which may set it again.
  auto fail = [&](const std::string& doing) {
    throw CheckpointError("cannot write checkpoint '" + path.string() + "'" + (doing.empty() ? "" : " (" + doing + ")") +
                          ": " + system_reason());
  };
  if (file.fd() < 0) fail("");
  Written written;
  uLong crc = crc32(0L, Z_NULL, 0);
  produce([&](const char* data, std::size_t size) {
    crc = crc32_update(crc, data, size);
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::write(file.fd(), data + done, size - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("write");
      }
      done += static_cast<std::size_t>(n);
    }
    written.bytes += size;
  });
  written.crc = static_cast<uint32_t>(crc);
  if (::fsync(file.fd()) != 0) fail("fsync");
  if (!file.close()) fail("close");
  if (!file.rename_to(path)) fail("rename");
  return written;
}

Written write_atomically(const fs::path& path, const std::string& text) {
  return write_atomically(path, [&](const ByteSink& sink) { sink(text.data(), text.size()); });
}

void sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the files are in place; only their durability across a power cut is weaker
  ::fsync(fd);
  ::close(fd);
}

fs::path sum_path(const fs::path& path) { return path.string() + ".sum"; }

}  // namespace

std::string checkpoint_file_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%012lld.pt", static_cast<long long>(step));
  return name;
}

void write_checkpoint_file(const std::string& path_text, const StateDict& checkpoint) {
  const fs::path path(path_text);
  std::error_code error;
  if (path.has_parent_path()) {
    fs::create_directories(path.parent_path(), error);
    if (error) {
      throw CheckpointError("cannot write checkpoint '" + path_text + "': cannot create its folder (" +
                            error.message() + ")");
    }
  }
  // The old .sum goes first: a .pt renamed over its predecessor never pairs with the old sum.
  ::unlink(sum_path(path).c_str());
  // Streamed: torch::pickle_save's bytes, without a copy of the whole file in memory.
  const Written written = write_atomically(path, [&](const ByteSink& sink) {
    write_torch_archive(checkpoint, /*type_tags=*/true, sink);
  });
  write_atomically(sum_path(path),
                   nlohmann::json{{"bytes", written.bytes}, {"crc32", hex(written.crc)}}.dump() + "\n");
  sync_folder(path.parent_path());
}

namespace {

/// What `path`'s checksum file says it holds, refused as CheckpointError when
/// the file or its sum is missing or malformed.
Written expected_sum(const std::string& path) {
  if (!fs::exists(path)) throw CheckpointError("checkpoint '" + path + "' does not exist");
  std::ifstream sum_file(sum_path(path));
  if (!sum_file) {
    throw CheckpointError("checkpoint '" + path + "' has no checksum file '" + sum_path(path).string() +
                          "': its write did not finish");
  }
  Written expected;
  try {
    const nlohmann::json sum = nlohmann::json::parse(sum_file);
    expected.bytes = sum.at("bytes").get<std::size_t>();
    expected.crc = static_cast<uint32_t>(std::stoul(sum.at("crc32").get<std::string>(), nullptr, 16));
  } catch (const std::exception&) {
    throw CheckpointError("checkpoint '" + path + "': its checksum file '" + sum_path(path).string() +
                          "' is not {\"bytes\": N, \"crc32\": \"hex\"}");
  }
  return expected;
}

/// `found` (the bytes read from `path`) against `expected`.
void check_sum(const std::string& path, const Written& found, const Written& expected) {
  if (found.bytes != expected.bytes) {
    throw CheckpointError("checkpoint '" + path + "' is truncated or was changed: " + std::to_string(found.bytes) +
                          " bytes, its checksum file says " + std::to_string(expected.bytes));
  }
  if (found.crc != expected.crc) {
    throw CheckpointError("checkpoint '" + path + "' is corrupted: CRC-32 " + hex(found.crc) +
                          ", its checksum file says " + hex(expected.crc));
  }
}

/// `file` mapped, or CheckpointError naming it and why not.
std::shared_ptr<const MappedFile> map_checkpoint(const std::string& path) {
  try {
    return std::make_shared<const MappedFile>(path, MappedFile::Access::kCopyOnWrite);
  } catch (const std::runtime_error& error) {
    throw CheckpointError(std::string("checkpoint file: ") + error.what());
  }
}

/// The size and CRC-32 of a mapped file, read 4 MiB at a time, each chunk's
/// pages handed back after it: a rank file of a large model is never held
/// whole to be vouched for. Nothing has written to the mapping yet.
Written sum_of(const MappedFile& file) {
  constexpr int64_t kChunk = int64_t{1} << 22;
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int64_t offset = 0; offset < file.bytes(); offset += kChunk) {
    const int64_t n = std::min(kChunk, file.bytes() - offset);
    crc = crc32_update(crc, reinterpret_cast<const char*>(file.data()) + offset, static_cast<std::size_t>(n));
    file.release(file.data() + offset, n);
  }
  return Written{static_cast<std::size_t>(file.bytes()), static_cast<uint32_t>(crc)};
}

/// What read_checkpoint_file checks of `path`, without reading its tensors.
void verify_checkpoint_file(const std::string& path) {
  const Written expected = expected_sum(path);
  check_sum(path, sum_of(*map_checkpoint(path)), expected);
}

/// The dict `load` unpickles; CheckpointError naming `name` when it is no LibTorch pickle of a dict.
template <class Load>
StateDict checkpoint_dict(Load&& load, const std::string& name) {
  c10::IValue value;
  try {
    value = load();
  } catch (const std::exception& error) {
    // LibTorch's messages carry a backtrace: its first line says enough.
    const std::string what = error.what();
    throw CheckpointError("checkpoint '" + name + "' cannot be read: " + what.substr(0, std::min<std::size_t>(what.find('\n'), 200)));
  }
  if (!value.isGenericDict()) throw CheckpointError("checkpoint '" + name + "' does not hold a dict");
  return value.toGenericDict();
}

}  // namespace

StateDict read_checkpoint_file(const std::string& path) {
  const Written expected = expected_sum(path);
  const std::shared_ptr<const MappedFile> file = map_checkpoint(path);
  check_sum(path, sum_of(*file), expected);
  return checkpoint_dict([&] { return safe_pickle_load(file); }, path);
}

StateDict parse_checkpoint_bytes(const std::vector<char>& bytes, const std::string& name) {
  return checkpoint_dict([&] { return safe_pickle_load(bytes); }, name);
}

std::vector<std::string> list_checkpoint_files(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> found;  // (name, path): names sort by step
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (std::regex_match(name, kCheckpointName)) {
      found.emplace_back(name, it->path().string());
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> paths;
  for (auto& entry : found) paths.push_back(std::move(entry.second));
  return paths;
}

LatestCheckpoint read_latest_checkpoint(const std::string& dir) {
  LatestCheckpoint latest;
  for (const auto& path : list_checkpoint_files(dir)) {
    try {
      latest.checkpoint = read_checkpoint_file(path);
      if (is_sharded_checkpoint(latest.checkpoint)) {
        // Every rank file vouched for by its sum, read a chunk at a time
        // (every rank sees the same files, so all fall back together past a
        // damaged one; none holds another's file to do it).
        for (const auto& file : rank_files(path, latest.checkpoint)) verify_checkpoint_file(file);
      }
      latest.path = path;
      return latest;
    } catch (const CheckpointError& error) {
      latest.rejected.push_back(error.what());
    }
  }
  std::string message = "no checkpoint in '" + dir + "' reads back";
  for (const auto& reason : latest.rejected) message += "; " + reason;
  throw CheckpointError(message);
}

void remove_old_checkpoints(const std::string& dir, int64_t keep) {
  int64_t complete = 0;
  for (const auto& path : list_checkpoint_files(dir)) {
    if (complete < std::max<int64_t>(keep, 1)) {
      complete += fs::exists(sum_path(path)) ? 1 : 0;
      continue;
    }
    std::error_code ignored;
    fs::remove(sum_path(path), ignored);  // the sum first: a half-removed checkpoint is never loaded
    fs::remove(path, ignored);
    // A sharded one's rank files: step-<step>.rank-*.pt and their sums.
    const std::string stem = fs::path(path).filename().string();
    const std::string prefix = stem.substr(0, stem.size() - 3) + ".rank-";
    std::vector<fs::path> ranks;
    for (fs::directory_iterator it(dir, ignored), end; !ignored && it != end; it.increment(ignored)) {
      if (it->path().filename().string().rfind(prefix, 0) == 0) ranks.push_back(it->path());
    }
    for (const auto& file : ranks) fs::remove(file, ignored);
  }
  remove_orphaned_rank_files(dir);
}

void remove_orphaned_rank_files(const std::string& dir) {
  // Rank files older than the newest manifest whose own manifest never came
  // (a job that died between its ranks' files and rank 0's manifest). The
  // newer ones may be a checkpoint being written now.
  const auto manifests = list_checkpoint_files(dir);
  if (manifests.empty()) return;
  const std::string newest = fs::path(manifests.front()).filename().string();
  static const std::regex rank_file(R"((step-\d{12})\.rank-\d+\.pt(\.sum)?)");
  std::vector<fs::path> orphans;
  std::error_code ignored;
  for (fs::directory_iterator it(dir, ignored), end; !ignored && it != end; it.increment(ignored)) {
    std::smatch match;
    const std::string name = it->path().filename().string();
    if (!std::regex_match(name, match, rank_file)) continue;
    const std::string manifest = match[1].str() + ".pt";
    std::error_code missing;
    if (manifest < newest && !fs::exists(fs::path(dir) / manifest, missing) && !missing) orphans.push_back(it->path());
  }
  for (const auto& file : orphans) fs::remove(file, ignored);
}

}  // namespace basin
