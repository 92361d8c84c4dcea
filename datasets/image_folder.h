#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "basin/core/data/dataset.h"
#include "basin/datasets/image_codec.h"

namespace basin {

/// How decoded pixels become a sample: [channels, height, width] floats,
/// x = (resize(pixels / 255) - mean) / std per channel, the resize bilinear
/// (as torch.nn.functional.interpolate's, align_corners=False, no antialias)
/// and only for an image of another size.
struct ImageTransform {
  int64_t channels = 3;                // 1: gray, 3: RGB
  int64_t height = 0, width = 0;       // 0: the first image's size
  bool resize = false;                 // false: an image of another size is refused
  std::vector<double> mean = {0.0};    // one per channel, or one for all
  std::vector<double> std = {1.0};
  int64_t max_pixels = kDefaultMaxImagePixels;  // a larger image is refused from its header, before decoding
};

/// One split of an image folder: the class names (its folders, sorted) and the samples.
struct ImageFolderSplit {
  std::vector<std::string> classes;
  TensorDataset data;
};

/// Reads `dir`, one folder per class of PNG or JPEG files (.png, .jpg,
/// .jpeg in any case; names starting with '.' skipped): classes are the
/// folders' names in sorted order, class by class, files sorted (the order
/// of torchvision's ImageFolder). `classes`, when given (the training
/// split's), fixes the labels: a folder not among them is refused. The
/// calling thread reads the files into a bounded queue; `threads` workers
/// decode and transform them; rank 0 shows a progress line. What does not
/// fit is a ConfigError naming `key` and the folder or the file; an image
/// above transform.max_pixels also names `key`'s sibling max_pixels (for
/// "data.train": "data.max_pixels"), the key that raises the limit.
ImageFolderSplit read_image_folder(const std::string& dir, const std::string& key, const ImageTransform& transform,
                                   int threads, const std::vector<std::string>& classes = {});

}  // namespace basin
