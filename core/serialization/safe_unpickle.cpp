#include "basin/core/serialization/safe_unpickle.h"

#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>

#include <ATen/core/Tensor.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import_read.h>

#include "basin/core/serialization/pickle_check.h"
#include "basin/core/serialization/zip_directory.h"

namespace basin {

namespace {

// A read outside the buffer returns 0 bytes; the zip reader treats the short
// read as a corrupt archive instead of copying memory it does not own (as
// LibTorch's own buffer reader did: found by fuzzing checkpoint loading).
class BoundedReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(std::string_view bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos > bytes_.size() || n > bytes_.size() - pos) return 0;
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  std::string_view bytes_;
};

c10::IValue load(std::string_view archive) {
  caffe2::serialize::PyTorchStreamReader reader(std::make_unique<BoundedReader>(archive));
  // The layout torch::pickle_save and torch.save write: data.pkl, tensors in data/.
  return torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"", /*type_resolver=*/{},
                                           /*obj_loader=*/{}, /*device=*/{}, reader);
}

// The archive again, with `program` as its data.pkl.
std::string with_program(std::string_view archive, const std::map<std::string, ZipEntry>& records,
                         const std::string& program) {
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&out](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  });
  for (const auto& [name, entry] : records) {
    if (name == "data.pkl") {
      writer.writeRecord(name, program.data(), program.size());
    } else {
      writer.writeRecord(name, archive.data() + entry.offset, entry.size);
    }
  }
  writer.writeEndOfFile();
  return out;
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

// Checks every tensor and drops the OrderedDict attributes a rewrite kept (check_pickle).
void check_and_tidy(const c10::IValue& value) {
  if (value.isTensor()) {
    check_inside_storage(value.toTensor());
  } else if (value.isGenericDict()) {
    auto dict = value.toGenericDict();
    (void)dict.erase(kDroppedAttributesKey);
    for (const auto& entry : dict) {
      check_and_tidy(entry.key());
      check_and_tidy(entry.value());
    }
  } else if (value.isList()) {
    const auto list = value.toList();
    for (std::size_t i = 0; i < list.size(); ++i) check_and_tidy(list.get(i));
  } else if (value.isTuple()) {
    for (const auto& element : value.toTuple()->elements()) check_and_tidy(element);
  }
}

}  // namespace

c10::IValue safe_pickle_load(const std::vector<char>& bytes) {
  const std::string_view archive(bytes.data(), bytes.size());
  // LibTorch names records relative to the folder of the archive's first entry.
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
  const auto program = records.find("data.pkl");
  if (program == records.end()) throw ArchiveError("the archive holds no data.pkl");
  const auto rewritten = check_pickle(archive.substr(program->second.offset, program->second.size),
                                      [&records](const std::string& key) -> std::optional<uint64_t> {
                                        const auto record = records.find("data/" + key);
                                        if (record == records.end()) return std::nullopt;
                                        return record->second.size;
                                      });
  const c10::IValue value = rewritten ? load(with_program(archive, records, *rewritten)) : load(archive);
  check_and_tidy(value);
  return value;
}

}  // namespace basin
