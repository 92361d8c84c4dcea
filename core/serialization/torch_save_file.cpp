#include "basin/core/serialization/torch_save_file.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <vector>

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

}  // namespace basin
