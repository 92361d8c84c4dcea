#include "basin/core/serialization/archive_writer.h"

#include <exception>
#include <string>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

namespace basin {

void write_torch_archive(const c10::IValue& value, bool type_tags, const ByteSink& sink) {
  // The pickle program is small (names, shapes, storage keys); the storages stay where they are.
  std::vector<char> program;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { program.insert(program.end(), data, data + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/type_tags);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  // A sink that throws (a full disk) must not throw through LibTorch's writer, whose destructor writes the
  // archive's end: its failure is kept, later pieces dropped, and it is rethrown once the writer is done.
  std::exception_ptr failure;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    if (!failure) {
      try {
        sink(static_cast<const char*>(data), size);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    return size;
  });
  // torch::jit::writeArchiveAndTensors' layout, which pickle_save and torch.save share.
  for (std::size_t i = 0; i < pickler.tensorData().size(); ++i) {
    const torch::jit::WriteableTensorData storage = torch::jit::getWriteableTensorData(pickler.tensorData()[i]);
    writer.writeRecord("data/" + std::to_string(i), storage.data(), storage.sizeInBytes());
  }
  writer.writeRecord("data.pkl", program.data(), program.size());
  writer.writeEndOfFile();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace basin
