#pragma once

#include <string>

#include <ATen/core/ivalue.h>

namespace basin {

/// The value in a file Python's torch.save (or torch::pickle_save) wrote,
/// read through safe_pickle_load's checks. `key` is the config key that
/// named the file: every refusal is a ConfigError naming it and the file.
c10::IValue read_torch_save_file(const std::string& path, const std::string& key);

}  // namespace basin
