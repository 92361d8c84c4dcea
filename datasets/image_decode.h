#pragma once

// image_folder's decode, shared between image_folder.cpp (the listing and the
// registered dataset) and image_decode.cpp (the decode): basin's own, not an
// API, and not installed.

#include <cstdint>
#include <string>
#include <vector>

#include "basin/core/data/dataset.h"
#include "basin/datasets/image_folder.h"

namespace basin {

/// One image of a split: its file and its class's label.
struct ImageFile {
  std::string path;
  int64_t label = 0;
};

/// The files' samples, decoded by `threads` workers.
TensorDataset decode_images(const std::vector<ImageFile>& files, const std::string& key, ImageTransform transform,
                            int threads);

}  // namespace basin
