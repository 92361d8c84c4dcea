#pragma once

#include <cstdint>
#include <map>
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

/// Writes `tensors` into `dir` as save_pretrained lays them out: one
/// model.safetensors while their bytes come to at most `max_shard_bytes`,
/// else model-00001-of-0000N.safetensors files, filled in order (a file is
/// closed before a tensor would take it past the limit; a tensor larger
/// than the limit has a file of its own), and model.safetensors.index.json
/// mapping each tensor to its file, with the total size. What an earlier
/// export left in the other layout is removed first, so that a reader never
/// prefers stale weights. Throws std::runtime_error naming the file.
void write_safetensors_checkpoint(const std::string& dir, const NamedTensors& tensors, std::uintmax_t max_shard_bytes,
                                  const std::map<std::string, std::string>& metadata = {});

/// A size as save_pretrained's max_shard_size takes it: a whole number of
/// bytes, or a string such as "500MB", "5GB" (powers of 1000) or "2GiB"
/// (powers of 1024). std::invalid_argument says what was expected.
std::uintmax_t parse_byte_size(const std::string& text);

}  // namespace basin
