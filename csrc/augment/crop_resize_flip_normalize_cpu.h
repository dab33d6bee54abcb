// CPU entry point of the fused augment kernel, for the batch engine's worker threads.
//
// Stage: augment. Input: a uint8 HWC image view (a decoded window). Output: one sample
// written in place into its slot of a batch tensor, through arbitrary element strides
// (NCHW and channels_last are both just strides). The per-pixel math is in
// crop_resize_flip_normalize.h, shared with the CUDA kernel.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

#include "augment/color_pass.h"
#include "augment/crop_resize_flip_normalize.h"  // Taps
#include "augment/geometry.h"  // Box: [top, left, height, width] in the view's pixels; Interpolation

namespace fastload {

struct ImageView {
  const uint8_t* data;
  int height;
  int width;
  int channels;        // 1 or 3; pixels are packed (column stride == channels)
  int64_t row_stride;  // in bytes
};

struct OutputView {
  void* data;  // points at element (0, 0, 0) of this sample's slot
  c10::ScalarType dtype;  // Byte, Float, Half or BFloat16
  int channels;           // == ImageView::channels
  int height;
  int width;
  int64_t stride_c, stride_y, stride_x;  // in elements
};

// Reusable per-thread buffers (filter taps, intermediate rows), so the hot loop
// does not allocate.
struct ResizeScratch {
  std::vector<float> horizontal_weights;
  std::vector<int> horizontal_first;
  std::vector<float> vertical_weights;
  std::vector<int> vertical_first;
  std::vector<float> intermediate;
  std::vector<augment::Taps> column_taps, row_taps;
  std::vector<uint8_t> color_pixels;  // the uint8 sample of the colour ops
};

// How one sample is resampled: the filter and the two mirrors.
struct Resample {
  bool flip = false;    // mirror left-right
  bool flip_v = false;  // mirror top-bottom
  Interpolation interpolation = Interpolation::kBilinear;
};

// out[c, y, x] = (resample(in, box)[flip_v ? H-1-y : y, flip ? W-1-x : x, c] * scale -
// mean[c]) / std[c], cast to out.dtype (uint8: round half away from zero, saturate).
// Resampling is Pillow's antialiased BILINEAR (torchvision antialias=True), BICUBIC or
// NEAREST (crop_resize_flip_normalize.h); taps clamp to the view; output pixels whose
// centre lies outside the view are 0 before normalisation (padding, as torchvision's
// CenterCrop pads). With `color` (one sample's ColorJitter, grayscale and erasing,
// color_pass.h): the resampled value is rounded to uint8, the colour ops run on it
// (torchvision's PIL stage), then the value map, then the erasing. Never throws for valid views.
void crop_resize_flip_normalize_cpu(const ImageView& in, const Box& box, const Resample& resample,
                                    float scale, const float* mean, const float* std,
                                    const OutputView& out, ResizeScratch& scratch,
                                    const augment::color::ColorPass* color = nullptr);

// Which build of the CPU loops this process runs: "avx2" (AVX2 + FMA, when the CPU has
// them and FASTLOAD_NO_AVX2 is unset) or "baseline" (x86-64 SSE2, or a non-x86 build).
const char* crop_resize_flip_normalize_cpu_path();

}  // namespace fastload
