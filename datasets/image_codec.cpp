#include "basin/datasets/image_codec.h"

#include <png.h>
#include <turbojpeg.h>

#include <cstring>
#include <memory>

namespace basin {
namespace {

bool is_png(const uint8_t* bytes, std::size_t size) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return size >= sizeof kSignature && std::memcmp(bytes, kSignature, sizeof kSignature) == 0;
}

bool is_jpeg(const uint8_t* bytes, std::size_t size) { return size >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff; }

// Before the pixels' buffer exists: the header alone says how many there will be.
void check_pixels(int64_t height, int64_t width, int64_t max_pixels) {
  if (height * width > max_pixels) throw ImageTooLargeError(height, width, max_pixels);
}

void check_channels(int64_t channels) {
  if (channels != 1 && channels != 3) throw std::invalid_argument("image channels must be 1 or 3");
}

// libpng's simplified API, asked for the file's own channels (gray or RGB,
// with alpha if the file has it) in 8 bits: a palette is expanded.
Image decode_png(const uint8_t* bytes, std::size_t size, int64_t max_pixels) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&png, bytes, size) == 0) throw ImageDecodeError(std::string("libpng: ") + png.message);
  std::unique_ptr<png_image, void (*)(png_imagep)> release(&png, png_image_free);
  check_pixels(png.height, png.width, max_pixels);
  const bool color = (png.format & PNG_FORMAT_FLAG_COLOR) != 0, alpha = (png.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  png.format = (color ? PNG_FORMAT_FLAG_COLOR : 0) | (alpha ? PNG_FORMAT_FLAG_ALPHA : 0);
  png.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;  // 16-bit values are sRGB-encoded, as in almost every file, not linear
  Image image{static_cast<int64_t>(png.height), static_cast<int64_t>(png.width), (color ? 3 : 1) + (alpha ? 1 : 0), {}};
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  if (png_image_finish_read(&png, /*background=*/nullptr, image.pixels.data(), /*row_stride=*/0, /*colormap=*/nullptr) == 0) {
    throw ImageDecodeError(std::string("libpng: ") + png.message);
  }
  return image;
}

using TurboHandle = std::unique_ptr<void, int (*)(tjhandle)>;

std::string turbo_error(tjhandle handle) { return std::string("libjpeg-turbo: ") + tjGetErrorStr2(handle); }

// A gray JPEG decodes to gray, any other to RGB (a CMYK one is refused).
Image decode_jpeg(const uint8_t* bytes, std::size_t size, int64_t max_pixels) {
  TurboHandle handle(tjInitDecompress(), tjDestroy);
  if (!handle) throw std::runtime_error(turbo_error(nullptr));
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(handle.get(), bytes, static_cast<unsigned long>(size), &width, &height, &subsampling, &colorspace) != 0) {
    throw ImageDecodeError(turbo_error(handle.get()));
  }
  check_pixels(height, width, max_pixels);
  const bool gray = colorspace == TJCS_GRAY;
  Image image{height, width, gray ? 1 : 3, {}};
  image.pixels.resize(static_cast<std::size_t>(height) * width * image.channels);
  // The accurate inverse DCT and smooth upsampling: libjpeg's defaults, which Pillow keeps.
  if (tjDecompress2(handle.get(), bytes, static_cast<unsigned long>(size), image.pixels.data(), width, /*pitch=*/0, height,
                    gray ? TJPF_GRAY : TJPF_RGB, TJFLAG_ACCURATEDCT) != 0) {
    // Warnings pass, as Pillow lets them ("extraneous bytes before marker"), but a file cut short, which
    // libjpeg fills with gray, is refused as Pillow refuses it: half an image is no sample.
    const std::string message = tjGetErrorStr2(handle.get());
    if (tjGetErrorCode(handle.get()) != TJERR_WARNING || message.find("Premature end") != std::string::npos) {
      throw ImageDecodeError("libjpeg-turbo: " + message);
    }
  }
  return image;
}

// As Pillow's convert(): alpha dropped; RGB to gray by ITU-R 601-2 luma in
// Pillow's fixed point, L = (19595 R + 38470 G + 7471 B + 2^15) >> 16; gray
// to RGB by copying.
Image with_channels(const Image& image, int64_t channels) {
  if (image.channels == channels) return image;
  const bool color = image.channels >= 3;
  Image out{image.height, image.width, channels, {}};
  const std::size_t pixels = static_cast<std::size_t>(image.height * image.width);
  out.pixels.resize(pixels * static_cast<std::size_t>(channels));
  for (std::size_t i = 0; i < pixels; ++i) {
    const uint8_t* in = &image.pixels[i * static_cast<std::size_t>(image.channels)];
    uint8_t* to = &out.pixels[i * static_cast<std::size_t>(channels)];
    if (channels == 1) {
      to[0] = color ? static_cast<uint8_t>((19595u * in[0] + 38470u * in[1] + 7471u * in[2] + 0x8000u) >> 16) : in[0];
    } else {
      for (int c = 0; c < 3; ++c) to[c] = in[color ? c : 0];
    }
  }
  return out;
}

}  // namespace

ImageTooLargeError::ImageTooLargeError(int64_t height_, int64_t width_, int64_t max_pixels_)
    : ImageDecodeError("is " + std::to_string(height_) + "x" + std::to_string(width_) + " pixels (" +
                       std::to_string(height_ * width_) + "), above the limit of " + std::to_string(max_pixels_) +
                       " pixels"),
      height(height_), width(width_), max_pixels(max_pixels_) {}

Image decode_image(const uint8_t* bytes, std::size_t size, int64_t channels, int64_t max_pixels) {
  check_channels(channels);
  if (is_png(bytes, size)) return with_channels(decode_png(bytes, size, max_pixels), channels);
  if (is_jpeg(bytes, size)) return with_channels(decode_jpeg(bytes, size, max_pixels), channels);
  throw ImageDecodeError("neither a PNG nor a JPEG image (its first bytes are neither's)");
}

std::vector<uint8_t> encode_png(const Image& image) {
  check_channels(image.channels);
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = image.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (png_image_write_get_memory_size(png, size, 0, image.pixels.data(), 0, nullptr) == 0) {
    throw std::runtime_error(std::string("libpng: ") + png.message);
  }
  std::vector<uint8_t> bytes(size);
  if (png_image_write_to_memory(&png, bytes.data(), &size, 0, image.pixels.data(), 0, nullptr) == 0) {
    throw std::runtime_error(std::string("libpng: ") + png.message);
  }
  bytes.resize(size);
  return bytes;
}

std::vector<uint8_t> encode_jpeg(const Image& image, int quality) {
  check_channels(image.channels);
  TurboHandle handle(tjInitCompress(), tjDestroy);
  if (!handle) throw std::runtime_error(turbo_error(nullptr));
  unsigned char* out = nullptr;
  unsigned long size = 0;
  if (tjCompress2(handle.get(), image.pixels.data(), static_cast<int>(image.width), 0, static_cast<int>(image.height),
                  image.channels == 1 ? TJPF_GRAY : TJPF_RGB, &out, &size, image.channels == 1 ? TJSAMP_GRAY : TJSAMP_444,
                  quality, TJFLAG_ACCURATEDCT) != 0) {
    tjFree(out);
    throw std::runtime_error(turbo_error(handle.get()));
  }
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  return bytes;
}

}  // namespace basin
