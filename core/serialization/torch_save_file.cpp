#include "basin/core/serialization/torch_save_file.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "basin/core/config_error.h"
#include "basin/core/serialization/safe_unpickle.h"

namespace basin {

c10::IValue read_torch_save_file(const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("config key '" + key + "': cannot read '" + path + "'");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return safe_pickle_load(bytes);
  } catch (const std::exception& error) {
    const std::string what = error.what();  // LibTorch's messages carry a backtrace: the first line says enough
    throw ConfigError("config key '" + key + "': '" + path + "' cannot be read as a torch.save file (" +
                      what.substr(0, std::min<std::size_t>(what.find('\n'), 200)) + ")");
  }
}

std::vector<char> torch_save_bytes(const c10::IValue& value) {
  std::vector<char> program;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { program.insert(program.end(), data, data + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  // torch.save's layout: each storage as data/<its index in the pickle>, then data.pkl.
  std::vector<char> file;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    file.insert(file.end(), bytes, bytes + size);
    return size;
  });
  for (std::size_t i = 0; i < pickler.tensorData().size(); ++i) {
    const torch::jit::WriteableTensorData storage = torch::jit::getWriteableTensorData(pickler.tensorData()[i]);
    writer.writeRecord("data/" + std::to_string(i), storage.data(), storage.sizeInBytes());
  }
  writer.writeRecord("data.pkl", program.data(), program.size());
  writer.writeEndOfFile();
  return file;
}

void write_torch_save_file(const std::string& path, const c10::IValue& value) {
  const std::vector<char> bytes = torch_save_bytes(value);
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) {
      std::remove(temporary.c_str());
      throw std::runtime_error("cannot write '" + path + "'");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot write '" + path + "' (rename failed)");
  }
}

}  // namespace basin
