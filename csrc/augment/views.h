// Several outputs per sample: image views with their own plans, and masks that follow a
// view's geometry.
//
// Stage: augment. Input: the plan of each image view, each mask's spec, a sample's
// regions (one per image view). Output: each view's random draws as a pure function of
// (seed, epoch, index, view), and the nearest-neighbour source index of every output
// row and column of a mask. Pure functions, no state; the engine (engine/sample.cpp)
// decodes once and applies them.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "../host_device.h"
#include "augment/params.h"
#include "augment/plan.h"

namespace fastload {

// How a mask's nearest-neighbour resize picks its source pixels.
enum class MaskSampling : int {
  // Pillow's NEAREST (torchvision v1 on a PIL mask: F.resize(mask, size, NEAREST)): the
  // pixel under the output pixel's centre, centres walked in double from step / 2.
  kPil = 0,
  // torch.nn.functional.interpolate(mode="nearest") (torchvision v2 on a tv_tensors.Mask
  // or a tensor): floor(o * (in / out)) in float32, clamped to in - 1.
  kTensor = 1,
  // OpenCV's INTER_NEAREST (albumentations' mask_interpolation: cv2.resize):
  // floor(o * (1 / (out / in))) in double, clamped to in - 1. It differs from torch's
  // float32 rule where o * in / out is an integer (e.g. in 14, out 6, o 3).
  kCv2 = 2,
};

// A mask: a second file of the sample (a single-channel uint8 label map) that takes its
// geometry (crop window, flips, resize, RandomCrop's padding) from image view `follows`.
// No colour ops, no normalisation; padding reads `fill` (RandomCrop's; CenterCrop's
// padding is 0 as torchvision's).
struct MaskSpec {
  int follows = 0;
  int fill = 0;
  MaskSampling sampling = MaskSampling::kPil;
};

// The seed of view `view` of a plan seeded `seed`: view 0 keeps the seed (a single-view
// pipeline's draws are view 0's), every other view has its own stream of draws.
FASTLOAD_HD int64_t view_seed(int64_t seed, int64_t view) {
  if (view == 0) return seed;
  return static_cast<int64_t>(splitmix64(splitmix64(static_cast<uint64_t>(seed)) ^
                                         splitmix64(0x56494557ull + static_cast<uint64_t>(view))));
}

// torch's nearest source index (aten/src/ATen/native/UpSample.h nearest_idx, size given,
// no scale factor): identity at the same size, o >> 1 at twice it, else
// min(floor(o * (float)in / out), in - 1) in float32.
FASTLOAD_HD int64_t tensor_nearest_index(int64_t o, int64_t in_size, int64_t out_size) {
  if (out_size == in_size) return o;
  if (out_size == 2 * in_size) return o >> 1;
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const int64_t i = static_cast<int64_t>(floorf(static_cast<float>(o) * scale));
  return i < in_size - 1 ? i : in_size - 1;
}

// OpenCV's nearest source index (imgproc/src/resize.cpp resizeNN: ifx = 1 / inv_scale_x,
// sx = cvFloor(x * ifx), both in double), clamped to in - 1.
FASTLOAD_HD int64_t cv2_nearest_index(int64_t o, int64_t in_size, int64_t out_size) {
  const double inverse = 1.0 / (static_cast<double>(out_size) / static_cast<double>(in_size));
  const int64_t i = static_cast<int64_t>(floor(static_cast<double>(o) * inverse));
  return i < in_size - 1 ? i : in_size - 1;
}

// One axis of a mask's geometry: output index o reads resized index offset + o of an
// axis of `in_size` source pixels resized to `resized` (Pillow's, torch's or OpenCV's nearest), plus
// `source_offset` (a crop's start, RandomResizedCrop); a resized index outside
// [0, resized) is padding. RandomCrop: resized == in_size, offset the padded crop's start.
struct MaskAxis {
  int64_t in_size = 0, resized = 0, offset = 0, source_offset = 0;
  bool flip = false;
};

// The mask axes (rows, then columns) of a sample whose followed view has `plan` and
// `region` on a height x width image: torchvision's crop-then-resize of
// RandomResizedCrop, resize-then-centre-crop of Resize/CenterCrop, pad-then-crop of
// RandomCrop, in integers. Throws GeometryError as region_of.
void mask_axes(const Plan& plan, const Region& region, int height, int width, MaskAxis& rows, MaskAxis& cols);

// Fills `table` (out_size entries) with each output index's source pixel, -1 for
// padding, flips applied.
void mask_axis_table(const MaskAxis& axis, int out_size, MaskSampling sampling, std::vector<int32_t>& table);

// Writes one mask sample: out[y, x] = source[rows[y], cols[x]] or `fill` where either
// index is -1. `out` is uint8 or int64 (out_dtype_bytes 1 or 8) with strides in elements.
void write_mask(const uint8_t* source, int64_t source_stride, const std::vector<int32_t>& rows,
                const std::vector<int32_t>& cols, int fill, void* out, int out_dtype_bytes, int64_t stride_y,
                int64_t stride_x);

}  // namespace fastload
