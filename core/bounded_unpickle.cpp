#include "basin/core/bounded_unpickle.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import_read.h>

namespace basin {

namespace {

// A read outside the buffer returns 0 bytes; the zip reader treats the short
// read as a corrupt archive instead of copying memory it does not own.
class BoundedReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(const std::vector<char>& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos > bytes_.size() || n > bytes_.size() - pos) return 0;
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::vector<char>& bytes_;
};

}  // namespace

c10::IValue bounded_pickle_load(const std::vector<char>& bytes) {
  caffe2::serialize::PyTorchStreamReader reader(std::make_unique<BoundedReader>(bytes));
  // The archive layout torch::pickle_save and torch.save write: data.pkl, tensors in data/.
  return torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"", /*type_resolver=*/{},
                                           /*obj_loader=*/{}, /*device=*/{}, reader);
}

}  // namespace basin
