// The engine's decode dispatch by format (see decode_image.h).
#include "decode/decode_image.h"

#include <stdexcept>

#include "check.h"
#include "decode/decode_png.h"
#include "decode/transcode.h"

namespace fastload {

bool decodes_natively(const uint8_t* data, size_t size) {
  switch (sniff_format(data, size)) {
    case ImageFormat::kJpeg:
      return true;
    case ImageFormat::kPng:
      return png_decoder_built();
    case ImageFormat::kUnknown:
      break;
  }
  return false;
}

ImageHeader read_image_header(const uint8_t* data, size_t size) {
  ImageHeader header;
  header.format = sniff_format(data, size);
  if (header.format == ImageFormat::kPng) {
    const PngInfo info = read_png_info(data, size);
    header.height = info.height;
    header.width = info.width;
  } else {  // a JPEG, or read_jpeg_info's "expected a JPEG" error
    const JpegInfo info = read_jpeg_info(data, size);
    header.height = info.height;
    header.width = info.width;
  }
  return header;
}

void decode_image_window(const uint8_t* data, size_t size, int top, int left, int height, int width,
                         int scale_denom, int channels, int64_t max_pixels, std::vector<int64_t>& segments,
                         DecodedWindow& out) {
  if (is_png(data, size)) {
    if (channels != 1 && channels != 3) {
      throw std::invalid_argument("expected channels 1 or 3, got " + std::to_string(channels));
    }
    // PNG has no cheaper reduced-resolution decode, and its rows are deflated in order:
    // the band of the window's rows, whole (the sampling view picks the columns).
    (void)left;
    (void)width;
    decode_png_rows(data, size, top, height, channels == 3 ? PngMode::kRgb : PngMode::kGray, max_pixels, out);
    return;
  }
  // A prepared file (fastload.prepare) carries its restart-segment index: only the
  // segments covering the window's rows are entropy-decoded, with the same pixels.
  if (read_embedded_segments(data, size, segments)) {
    decode_jpeg_rows(data, size, segments.data(), static_cast<int64_t>(segments.size() / 2), top, left, height,
                     width, scale_denom, channels, max_pixels, out);
  } else {
    decode_jpeg_window(data, size, top, left, height, width, scale_denom, channels, max_pixels, out);
  }
}

}  // namespace fastload
