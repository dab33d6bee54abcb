// PNG decoding on the CPU with libpng: what PIL gives for the same file, as an image
// (convert("RGB") / convert("L")) or as a label map (np.array of a mode 1, L or P image).
//
// Stage: decode. Input: the bytes of one PNG. Output: uint8 HWC pixels of a band of rows.
// Thread-safe: every call owns its own libpng state. All failures throw
// fastload::DecodeError (check.h) carrying libpng's message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "decode/decode_jpeg.h"  // DecodedWindow, kDefaultMaxPixels

namespace fastload {

// PNG colour types (IHDR).
enum PngColorType : int { kPngGray = 0, kPngRgb = 2, kPngPalette = 3, kPngGrayAlpha = 4, kPngRgba = 6 };

// IHDR, read from the bytes without libpng (the engine's header stage).
struct PngInfo {
  int height = 0;
  int width = 0;
  int bit_depth = 0;   // 1, 2, 4, 8 or 16
  int color_type = 0;  // PngColorType
  bool interlaced = false;
};

// What a decode returns:
//   kRgb:  Image.open(f).convert("RGB"): palette colours (indices past the palette's end
//          are black, as in Pillow), alpha and tRNS dropped, gray replicated, sub-8-bit
//          gray scaled to 0..255 (1 bit: 0 / 255), 16-bit colour reduced to its high
//          byte, 16-bit gray ("I;16") clipped to 255.
//   kGray: convert("L"): the same, then Pillow's luma (R * 19595 + G * 38470 + B * 7471
//          + 0x8000) >> 16 for colour.
//   kMask: np.array(Image.open(f)) of a label map: palette indices (not colours) for
//          colour type 3, gray values for 8-bit gray and 2/4-bit gray (scaled as PIL's
//          "L"), 0 / 1 for 1-bit gray (PIL's mode "1"). Other files (colour, alpha,
//          16-bit) are refused with a DecodeError that says what the file is.
enum class PngMode : int { kRgb = 0, kGray = 1, kMask = 2 };

// True when this build decodes PNG natively (libpng was found when it was built);
// otherwise every PNG call below throws DecodeError saying so.
bool png_decoder_built();

// The IHDR of a PNG (signature, IHDR chunk length, type and field values checked; its
// CRC is libpng's to check). Throws DecodeError.
PngInfo read_png_info(const uint8_t* data, size_t size);

// The decompression-bomb limit: "" when height * width <= max_pixels (<= 0: no limit),
// else the message (says how to raise it). Checked from the IHDR before any allocation.
std::string png_limit_error(const PngInfo& info, int64_t max_pixels);

// Decodes rows [top, top + height) of the image (height <= 0: to the last row), every
// column, into `out` (reused): out.top = top, out.left = 0, out.width = the image's
// width, scale_denom 1, channels 3 (kRgb) or 1. A non-interlaced file is read only down
// to the band's last row; an interlaced one is read whole. Throws DecodeError (empty,
// not a PNG, corrupt or truncated where the band needs it, over max_pixels, a mask of a
// file that is not a label map, or built without libpng) and std::invalid_argument for
// a band outside the image.
void decode_png_rows(const uint8_t* data, size_t size, int top, int height, PngMode mode, int64_t max_pixels,
                     DecodedWindow& out);

}  // namespace fastload
