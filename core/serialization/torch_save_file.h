#pragma once

#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

namespace basin {

/// The value in a file Python's torch.save (or torch::pickle_save) wrote,
/// read through safe_pickle_load's checks. `key` is the config key that
/// named the file: every refusal is a ConfigError naming it and the file.
c10::IValue read_torch_save_file(const std::string& path, const std::string& key);

/// The bytes Python's torch.save would write for `value` (dicts, lists,
/// tensors, numbers, strings): unlike torch::pickle_save, containers carry
/// no TorchScript type tags, so torch.load(path, weights_only=True) (the
/// default since PyTorch 2.6) reads them. Tensors are written from the CPU.
std::vector<char> torch_save_bytes(const c10::IValue& value);

/// Writes torch_save_bytes(value) to `path` through a temporary file and a
/// rename: a failed write leaves no half file. Throws std::runtime_error
/// naming the file.
void write_torch_save_file(const std::string& path, const c10::IValue& value);

}  // namespace basin
