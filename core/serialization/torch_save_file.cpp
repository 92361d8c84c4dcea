#include "basin/core/serialization/torch_save_file.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

#include "basin/core/config/config_error.h"
#include "basin/core/serialization/archive_writer.h"
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
  std::vector<char> file;
  write_torch_archive(value, /*type_tags=*/false, [&](const char* data, std::size_t size) {
    file.insert(file.end(), data, data + size);
  });
  return file;
}

void write_torch_save_file(const std::string& path, const c10::IValue& value) {
  const std::string temporary = path + ".tmp";
  try {
    std::ofstream out;
    out.exceptions(std::ios::badbit | std::ios::failbit);
    out.open(temporary, std::ios::binary | std::ios::trunc);
    write_torch_archive(value, /*type_tags=*/false, [&](const char* data, std::size_t size) {
      out.write(data, static_cast<std::streamsize>(size));
    });
    out.flush();
  } catch (const std::ios_base::failure&) {
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot write '" + path + "'");
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot write '" + path + "' (rename failed)");
  }
}

}  // namespace basin
