#pragma once

#include <string>

#include "basin/core/serialization/safetensors_file.h"

namespace basin {

/// The tensors of a Hugging Face checkpoint directory: `dir`/model.safetensors,
/// or the files `dir`/model.safetensors.index.json splits them over (its
/// "weight_map" of tensor name -> file name), sorted by name.
/// Each file is read as read_safetensors_file reads one; the index with the
/// same distrust: a file named outside `dir` (a path, "..", an absolute
/// name), a file that does not exist, a tensor in two files or in a file the
/// index does not name it in, and a tensor the index names that its file
/// lacks are refused, as a ConfigError naming `key`, the index and the
/// tensor or file.
NamedTensors read_safetensors_checkpoint(const std::string& dir, const std::string& key);

}  // namespace basin
