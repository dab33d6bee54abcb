// JPEG decoding on the CPU with libjpeg-turbo: header, crop window, DCT scaling.
//
// Stage: decode. Input: the bytes of one JPEG. Output: uint8 HWC pixels of a window.
// Thread-safe: every call owns its own libjpeg state. All failures throw
// fastload::DecodeError (check.h) carrying libjpeg's message.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "decode/image_format.h"  // is_jpeg

namespace fastload {

// Pillow's default decompression-bomb limit (Image.MAX_IMAGE_PIXELS). A macro as well, so
// the operator schemas (csrc/fastload.cpp) spell the same number as their default; Python
// reads it as fastload._C.DEFAULT_MAX_PIXELS.
#define FASTLOAD_DEFAULT_MAX_PIXELS 178956970
constexpr int64_t kDefaultMaxPixels = FASTLOAD_DEFAULT_MAX_PIXELS;

struct JpegInfo {
  int height = 0;
  int width = 0;
  int components = 0;   // in the file: 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  int color_space = 0;  // libjpeg's J_COLOR_SPACE of the file
  bool progressive = false;
};

// Reads only the header. Throws DecodeError.
JpegInfo read_jpeg_info(const uint8_t* data, size_t size);

// A progressive file can hold any number of scans, and libjpeg re-reads the whole
// coefficient buffer for each: a few kilobytes of crafted scans can cost minutes. Real
// encoders write about 10; libjpeg-turbo's own fuzzers stop at 500.
constexpr int kMaxProgressiveScans = 500;

// Start-of-scan markers in the file, counted by walking its markers and entropy-coded
// segments (no decoding); stops counting once past stop_after. A malformed marker
// structure ends the walk (libjpeg reports it when decoding).
int count_jpeg_scans(const uint8_t* data, size_t size, int stop_after);

// The decompression-bomb limits every decoder applies before decoding (the CPU decoder,
// nvJPEG and its CPU fallback): more than max_pixels pixels from the header (<= 0: no
// limit), or a progressive file with more than kMaxProgressiveScans scans. Returns ""
// when the file is within them, else the error message (says how to raise the limit).
std::string jpeg_limit_error(const uint8_t* data, size_t size, const JpegInfo& info, int64_t max_pixels);

// A decoded window of a JPEG, possibly DCT-scaled.
struct DecodedWindow {
  std::vector<uint8_t> pixels;  // HWC, row stride = width * channels
  int height = 0;               // rows in `pixels`
  int width = 0;                // columns in `pixels`
  int channels = 0;             // 1 or 3
  int scale_denom = 1;          // decoded at 1/scale_denom
  int scaled_height = 0;        // size of the whole image at that scale
  int scaled_width = 0;
  int top = 0;                  // position of pixels(0, 0) in the scaled whole image
  int left = 0;
};

// Decodes at least the full-resolution window [top, top+height) x [left, left+width)
// (clamped to the image) at 1/scale_denom (1, 2, 4 or 8): scaled rows floor(top/d) ..
// ceil((top+height)/d) exactly, and columns that may start left of the window and be
// wider (libjpeg crops at iMCU boundaries); `out.top/left` say where it lies. Every
// pixel returned is bit-identical to the same pixel of a full decode at that scale.
// height/width <= 0 mean the whole image. channels: 3 (RGB; gray and CMYK/YCCK are
// converted as Pillow's convert("RGB") does) or 1 (luma: the Y plane; CMYK: Pillow's
// convert("L")). Rows below the window are never read.
// Throws DecodeError when the data is empty, not a JPEG, corrupt or truncated where
// the window needs it (any libjpeg warning counts), or over jpeg_limit_error's limits
// (checked before decoding). Throws
// std::invalid_argument for a bad scale_denom or channels, or a window that misses the
// image. `out` is reused to avoid reallocations.
void decode_jpeg_window(const uint8_t* data, size_t size, int top, int left, int height,
                        int width, int scale_denom, int channels, int64_t max_pixels,
                        DecodedWindow& out);

// What the decode ops return for a decoded window: exactly the scaled window (columns
// floor(left / d) .. ceil((left + width) / d); `whole`: the whole image), as a uint8
// [h, w, C] tensor that owns `window`'s pixels (no copy when libjpeg's columns already
// are the window's).
at::Tensor scaled_window_tensor(std::unique_ptr<DecodedWindow> window, bool whole, int left, int width,
                                int scale_denom);

// Largest DCT scale denominator in {1, 2, 4, 8} at which a crop of crop_h x crop_w
// full-resolution pixels still covers out_h x out_w output pixels:
// ceil(crop / d) >= out in both dimensions (out <= 0 constrains nothing), and crop >= d.
int choose_scale_denom(int crop_h, int crop_w, int out_h, int out_w);

}  // namespace fastload
