#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace basin {

/// Reads an IDX file of unsigned bytes (the MNIST family's format), gzipped
/// or not, into a uint8 tensor of the dimensions its header gives.
/// Throws std::runtime_error naming the file on a missing or malformed file.
at::Tensor read_idx_file(const std::string& path);

/// Writes `data` (uint8) as an IDX file, gzipped when the name ends in .gz;
/// tests build small files with it.
void write_idx_file(const std::string& path, const at::Tensor& data);

}  // namespace basin
