#pragma once

#include <string>

#include "basin/core/serialization/safetensors_file.h"

namespace basin {

/// The tensors of a Hugging Face checkpoint directory, as transformers
/// finds them: `dir`/model.safetensors where it exists (in the file's
/// order), else the files `dir`/model.safetensors.index.json splits them over
/// (its "weight_map" of tensor name -> file name; sorted by name). Each file
/// is read as read_safetensors_file reads one; the index with the same
/// distrust: at most 100 MiB, nested no deeper than an index, 1 to 2^20
/// entries; a file named outside `dir` (a path, "..", an absolute name), one
/// that is no regular file (links are followed, as Hugging Face's cache
/// needs), a tensor in a file the index does not name it in, and a tensor the
/// index names that its file lacks are refused, as a ConfigError naming `key`,
/// the index and the tensor or file.
NamedTensors read_safetensors_checkpoint(const std::string& dir, const std::string& key);

}  // namespace basin
