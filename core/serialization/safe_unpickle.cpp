#include "basin/core/serialization/safe_unpickle.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include <ATen/core/Tensor.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include "basin/core/base/mapped_file.h"
#include "basin/core/serialization/pickle_check.h"
#include "basin/core/serialization/zip_directory.h"

namespace basin {

namespace {

// The archive's entries by name inside its folder ("data.pkl", "data/0", ...),
// as LibTorch names them: relative to the folder of the first entry.
std::map<std::string, ZipEntry> records_of(std::string_view archive) {
  std::map<std::string, ZipEntry> records;
  std::string folder;
  for (auto& entry : read_zip_directory(archive)) {
    const std::size_t slash = entry.name.find('/');
    if (slash == std::string::npos) throw ArchiveError("zip entry '" + entry.name + "' is not in the archive's folder");
    if (folder.empty()) folder = entry.name.substr(0, slash + 1);
    if (entry.name.compare(0, folder.size(), folder) != 0) continue;
    const std::string name = entry.name.substr(folder.size());
    if (!records.emplace(name, entry).second) throw ArchiveError("zip entry '" + entry.name + "' appears twice");
  }
  return records;
}

uint64_t format_version(std::string_view archive, const std::map<std::string, ZipEntry>& records) {
  for (const char* name : {".data/version", "version"}) {
    const auto found = records.find(name);
    if (found == records.end()) continue;
    const std::string_view text = archive.substr(found->second.offset, std::min<uint64_t>(found->second.size, 20));
    uint64_t version = 0;
    std::size_t digits = 0;
    for (; digits < text.size() && text[digits] >= '0' && text[digits] <= '9'; ++digits) {
      version = version * 10 + static_cast<uint64_t>(text[digits] - '0');
    }
    if (digits == 0) throw ArchiveError(std::string("the archive's ") + name + " record is not a number");
    return version;
  }
  throw ArchiveError("the archive has no version record");
}

// Rebuilding a tensor sets its sizes and strides without checking them against the storage.
void check_inside_storage(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.numel() == 0) return;
  uint64_t last = static_cast<uint64_t>(tensor.storage_offset());
  bool overflow = tensor.storage_offset() < 0;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    const int64_t stride = tensor.stride(d);
    uint64_t reach = 0;
    overflow |= stride < 0 ||
                __builtin_mul_overflow(static_cast<uint64_t>(tensor.size(d) - 1), static_cast<uint64_t>(stride), &reach) ||
                __builtin_add_overflow(last, reach, &last);
  }
  uint64_t bytes = 0;
  overflow |= __builtin_mul_overflow(last + 1, static_cast<uint64_t>(tensor.element_size()), &bytes);
  if (overflow || bytes > tensor.storage().nbytes()) {
    std::ostringstream message;
    message << "a tensor of shape " << tensor.sizes() << ", strides " << tensor.strides() << " and offset "
            << tensor.storage_offset() << " reaches past its " << tensor.storage().nbytes() << "-byte storage";
    throw ArchiveError(message.str());
  }
}

// Checks every tensor and drops the OrderedDict attributes a rewrite kept
// (check_pickle), visiting each shared value once: the walk bounded the
// depth, and shared values can make the paths exponentially many.
void check_and_tidy(const c10::IValue& value, std::unordered_set<const void*>& seen) {
  if (value.isTensor()) {
    if (seen.insert(value.toTensor().unsafeGetTensorImpl()).second) check_inside_storage(value.toTensor());
    return;
  }
  if (!value.isGenericDict() && !value.isList() && !value.isTuple()) return;
  if (!seen.insert(value.internalToPointer()).second) return;
  if (value.isGenericDict()) {
    auto dict = value.toGenericDict();
    (void)dict.erase(kDroppedAttributesKey);
    for (const auto& entry : dict) {
      check_and_tidy(entry.key(), seen);
      check_and_tidy(entry.value(), seen);
    }
  } else if (value.isList()) {
    const auto list = value.toList();
    for (std::size_t i = 0; i < list.size(); ++i) check_and_tidy(list.get(i), seen);
  } else {
    for (const auto& element : value.toTuple()->elements()) check_and_tidy(element, seen);
  }
}

/// safe_pickle_load of `archive`, each storage's bytes given by `storage_of` its entry.
c10::IValue load(std::string_view archive, const std::function<at::DataPtr(const ZipEntry&)>& storage_of) {
  const std::map<std::string, ZipEntry> records = records_of(archive);
  const auto data = records.find("data.pkl");
  if (data == records.end()) throw ArchiveError("the archive holds no data.pkl");
  const uint64_t version = format_version(archive, records);
  std::string_view program = archive.substr(data->second.offset, data->second.size);
  const auto rewritten = check_pickle(program, [&records](const std::string& key) -> std::optional<uint64_t> {
    const auto record = records.find("data/" + key);
    if (record == records.end()) return std::nullopt;
    return record->second.size;
  });
  if (rewritten) program = *rewritten;

  // LibTorch's unpickler, fed from the checked bytes: the program through a
  // reader that stops at its end, each storage from its checked entry.
  std::size_t position = 0;
  auto read_program = [&program, &position](char* buffer, std::size_t n) {
    const std::size_t count = std::min(n, program.size() - position);
    std::memcpy(buffer, program.data() + position, count);
    position += count;
    return count;
  };
  auto read_record = [&records, &storage_of](const std::string& key) {
    return storage_of(records.at("data/" + key));  // check_pickle found it
  };
  // Storages load on the CPU whatever device saved them; restoring copies them where they belong.
  torch::jit::Unpickler unpickler(read_program, /*type_resolver=*/nullptr, /*obj_loader=*/nullptr, read_record,
                                  at::Device(at::kCPU));
  unpickler.set_version(version);
  const c10::IValue value = unpickler.parse_ivalue();
  std::unordered_set<const void*> seen;
  check_and_tidy(value, seen);
  return value;
}

at::DataPtr copied(std::string_view archive, const ZipEntry& entry) {
  at::DataPtr storage = c10::GetCPUAllocator()->allocate(entry.size);
  if (entry.size > 0) std::memcpy(storage.get(), archive.data() + entry.offset, entry.size);
  return storage;
}

// What a storage viewing a mapping holds: the mapping, alive while any storage views it.
void drop_mapping(void* file) { delete static_cast<std::shared_ptr<const MappedFile>*>(file); }

// PyTorch's writer starts each record at a multiple of 64 bytes; any element type is aligned there.
constexpr uint64_t kRecordAlignment = 64;

}  // namespace

c10::IValue safe_pickle_load(const std::vector<char>& bytes) {
  const std::string_view archive(bytes.data(), bytes.size());
  return load(archive, [&archive](const ZipEntry& entry) { return copied(archive, entry); });
}

c10::IValue safe_pickle_load(const std::shared_ptr<const MappedFile>& file) {
  const std::string_view archive(reinterpret_cast<const char*>(file->data()), static_cast<std::size_t>(file->bytes()));
  return load(archive, [&](const ZipEntry& entry) {
    const uint8_t* at = file->data() + entry.offset;
    if (entry.size == 0 || reinterpret_cast<uintptr_t>(at) % kRecordAlignment != 0) return copied(archive, entry);
    // The mapping is copy-on-write, so whoever writes to the tensor writes to its own copy of the page.
    return at::DataPtr(const_cast<uint8_t*>(at), new std::shared_ptr<const MappedFile>(file), &drop_mapping,
                       at::Device(at::kCPU));
  });
}

void release_mapped_pages(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  const at::DataPtr& storage = tensor.storage().data_ptr();
  if (storage.get_deleter() != &drop_mapping) return;
  const auto& file = *static_cast<const std::shared_ptr<const MappedFile>*>(storage.get_context());
  file->release(storage.get(), static_cast<int64_t>(tensor.storage().nbytes()));
}

}  // namespace basin
