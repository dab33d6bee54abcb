// Format signatures (see image_format.h).
#include "decode/image_format.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace fastload {

namespace {
constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
}  // namespace

bool is_jpeg(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

bool is_png(const uint8_t* data, size_t size) {
  return size >= sizeof(kPngSignature) && std::memcmp(data, kPngSignature, sizeof(kPngSignature)) == 0;
}

ImageFormat sniff_format(const uint8_t* data, size_t size) {
  if (is_jpeg(data, size)) return ImageFormat::kJpeg;
  if (is_png(data, size)) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

std::string describe_prefix(const uint8_t* data, size_t size) {
  std::ostringstream s;
  s << size << " bytes starting with";
  static const char* hex = "0123456789ABCDEF";
  for (size_t i = 0; i < std::min<size_t>(size, 4); ++i) {
    s << ' ' << hex[data[i] >> 4] << hex[data[i] & 15];
  }
  // A PNG whose signature is damaged after the first 4 bytes is still named: it was
  // meant to be one.
  if (size >= 4 && std::memcmp(data, kPngSignature, 4) == 0) s << " (a PNG file)";
  if (is_jpeg(data, size)) s << " (a JPEG file)";
  if (size >= 6 && (std::memcmp(data, "GIF87a", 6) == 0 || std::memcmp(data, "GIF89a", 6) == 0)) s << " (a GIF file)";
  if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0) s << " (a WebP file)";
  if (size >= 2 && data[0] == 'B' && data[1] == 'M') s << " (a BMP file?)";
  return s.str();
}

}  // namespace fastload
