#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace basin {

/// Tensors by name, in the order a file lists them.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// The tensor `tensors` names `name`, or null.
const at::Tensor* find_tensor(const NamedTensors& tensors, const std::string& name);

/// The tensors of a safetensors file (Hugging Face's format: an 8-byte
/// little-endian header length, a JSON header of name -> {dtype, shape,
/// data_offsets}, then the bytes), read with the distrust any downloaded file
/// deserves: the header's length and every tensor's byte range lie inside the
/// file, no two ranges overlap, each range holds exactly its dtype times its
/// shape, and the dtype is one basin knows (F64, F32, F16, BF16, I64, I32,
/// I16, I8, U8, BOOL). `key` is the config key that named the file: every
/// refusal is a ConfigError naming it, the file and the tensor. Tensors come
/// back contiguous, on the CPU, in the file's order.
NamedTensors read_safetensors_file(const std::string& path, const std::string& key);

/// Writes `tensors` (and string `metadata`, under "__metadata__") as a
/// safetensors file, through a temporary file and a rename: a failed write
/// leaves no half file. Names must be unique. Throws std::runtime_error
/// naming the file.
void write_safetensors_file(const std::string& path, const NamedTensors& tensors,
                            const std::map<std::string, std::string>& metadata = {});

}  // namespace basin
