#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace basin {

/// Pixels of one image: rows of `width` pixels of `channels` bytes (1: gray,
/// 3: RGB), height * width * channels bytes in all, top row first.
struct Image {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  std::vector<uint8_t> pixels;
};

/// What an image file's bytes could not be decoded into: the reason, in the
/// decoder's words; the caller names the file.
class ImageDecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An image whose header asks for more pixels than the caller allows: refused
/// before any pixel is decoded or allocated. A PNG of one value compresses
/// 30000 x 30000 pixels into 1 MB; decoded to RGB floats it would take 10.8 GB.
class ImageTooLargeError : public ImageDecodeError {
 public:
  ImageTooLargeError(int64_t height, int64_t width, int64_t max_pixels);
  int64_t height, width, max_pixels;
};

/// Pillow's limit: it refuses (DecompressionBombError) images above twice
/// its Image.MAX_IMAGE_PIXELS of 89,478,485 pixels.
constexpr int64_t kDefaultMaxImagePixels = 2 * 89478485;

/// Decodes a PNG (libpng) or JPEG (libjpeg-turbo) held in memory, told apart
/// by their first bytes, into `channels` channels (1 or 3) as Pillow's
/// Image.open(...).convert("L" or "RGB") does, to the bit for 8-bit files:
/// alpha dropped, colour to gray by ITU-R 601-2 luma (Pillow's rounding),
/// gray copied to each colour. An image of more than `max_pixels` pixels
/// (height x width, from the header) is an ImageTooLargeError.
Image decode_image(const uint8_t* bytes, std::size_t size, int64_t channels,
                   int64_t max_pixels = kDefaultMaxImagePixels);

/// Encoders, for tests and benchmarks that make their own images: PNG is
/// lossless; JPEG at `quality` (1-100) with 4:4:4 sampling.
std::vector<uint8_t> encode_png(const Image& image);
std::vector<uint8_t> encode_jpeg(const Image& image, int quality);

}  // namespace basin
