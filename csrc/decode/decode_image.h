// The engine's decode, by format: one entry point that sniffs the bytes
// (decode/image_format.h) and calls the JPEG or PNG decoder, so that the engine names no
// format (engine/sample.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "decode/decode_jpeg.h"
#include "decode/image_format.h"

namespace fastload {

struct ImageHeader {
  ImageFormat format = ImageFormat::kUnknown;
  int height = 0;
  int width = 0;
};

// True for the formats this build decodes in C++: JPEG, and PNG when built with libpng.
// Others go to Python's PIL fallback (Status::kNotJpeg).
bool decodes_natively(const uint8_t* data, size_t size);

// Size and format from the header alone. Throws DecodeError.
ImageHeader read_image_header(const uint8_t* data, size_t size);

// Decodes at least the full-resolution window [top, top+height) x [left, left+width)
// into `out`, as decode_jpeg_window describes (out.top/left/scale_denom say what was
// decoded): a JPEG at 1/scale_denom, only its window (only the restart segments of its
// rows when the file is a prepared one carrying a segment index; `segments` is scratch);
// a PNG at full resolution (its scale_denom is 1 whatever was asked), whole rows of the
// window's band. channels: 3 (RGB) or 1 (luma). Throws DecodeError and
// std::invalid_argument as the format's decoder does.
void decode_image_window(const uint8_t* data, size_t size, int top, int left, int height, int width,
                         int scale_denom, int channels, int64_t max_pixels, std::vector<int64_t>& segments,
                         DecodedWindow& out);

}  // namespace fastload
