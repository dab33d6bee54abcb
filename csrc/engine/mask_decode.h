// A mask's pixels: the one place where a mask file's format is recognised and decoded.
//
// Stage: decode (of a sample's second file). Input: the mask file's bytes. Output: a
// single-channel uint8 label map, full resolution (masks are never DCT-scaled: nearest
// sampling reads exact labels). Must not: take the GIL; convert labels (a P-mode PNG's
// palette indexes are the labels, as np.array(Image.open(path)) gives them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "decode/decode_jpeg.h"

namespace fastload::engine {

struct MaskImage {
  std::vector<uint8_t> pixels;  // row stride = width
  int height = 0, width = 0;
};

// The formats decode_mask recognises by their first bytes.
enum class MaskFormat : int { kUnknown = 0, kJpeg = 1, kNpy = 2, kPng = 3 };
MaskFormat mask_format(const uint8_t* data, size_t size);

// Decodes a mask file into `out` (reused): a PNG of mode L or P (as np.array(Image.open(path))
// gives it: palette indexes), a .npy array of uint8 [H, W] or [H, W, 1] (C order), or a
// grayscale JPEG (its luma; lossy, for masks that were saved so).
// Throws DecodeError naming what was expected.
void decode_mask(const uint8_t* data, size_t size, int64_t max_pixels, MaskImage& out, DecodedWindow& scratch);

}  // namespace fastload::engine
