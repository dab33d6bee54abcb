// Per-pixel math of the fused augment kernel, shared by the CPU and CUDA kernels.
//
// Everything here is FASTLOAD_HD (host and device), pure and small. The CPU kernel calls
// these functions once per output row and column to build its tap tables; the CUDA kernel
// calls them once per output pixel. So the CPU test suite checks the very code the GPU runs.
//
// Semantics, per axis: Pillow's resample of the chosen interpolation (antialiased), which
// for BILINEAR is also torch's interpolate(mode="bilinear", antialias=True,
// align_corners=False); BILINEAR_NO_ANTIALIAS is the same arithmetic with filterscale 1,
// which is torch's interpolate(mode="bilinear", antialias=False) and OpenCV's INTER_LINEAR
// (a centre within half a pixel of the edge reads the edge pixel alone, as both clamp):
//   scale   = box_size / out_size
//   centre  = box_start + (i + 0.5) * scale          source coordinate of output index i
//   filterscale = max(scale, 1)                       the filter widens when shrinking
//                                                     (1 without antialiasing)
//   support = filter_support * filterscale            bilinear 1, bicubic 2
//   taps j  = [int(centre - support + 0.5), int(centre + support + 0.5)) clamped to
//             [0, in_size) -- the image, not the box (Pillow and torch do the same)
//   weight  = filter((j + 0.5 - centre) / filterscale), normalised to sum 1; the filter
//             is Pillow's triangle (bilinear) or its cubic with a = -0.5 (bicubic)
//   nearest: Pillow's NEAREST resize (an affine scale): the one tap (int)x_i, weight 1,
//             x_0 = box_start + step / 2, x_{i+1} = x_i + step, step = box_size / out_size,
//             all in double and accumulated, as Pillow does: a centre on a pixel edge
//             (256 -> 224 puts every 7th there) goes the way Pillow's rounding sends it;
//             padding where x_i lies outside [0, in_size)
// An output pixel whose centre lies outside [0, in_size) on either axis is padding: its
// resampled value is 0 (torchvision's CenterCrop pads with 0 before Normalize).
// Bicubic's weights go negative, so its resampled values can leave [0, 255]: like Pillow,
// the horizontal pass runs first and its result is clipped to [0, 255], then the
// vertical pass, clipped again (Pillow rounds both to uint8; here they stay float).
// Then value = v * alpha[c] + beta[c] (alpha = scale / std, beta = -mean / std), cast to
// the output dtype: uint8 rounds half away from zero and saturates; float16/bfloat16
// round to nearest even.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "../host_device.h"
#include "geometry.h"  // Interpolation

namespace fastload::augment {

// The mapping of one output axis onto the source image.
struct Axis {
  float start;             // box start (top or left), source pixels
  float scale;             // box_size / out_size: source pixels per output pixel
  float support;           // filter support * filterscale: the taps' half-width
  float inv_filter_scale;  // 1 / filterscale (Pillow and torch multiply by it too)
  int in_size;             // image extent on this axis; taps clamp to [0, in_size)
  Interpolation mode;
  double step;             // box_size / out_size in double: Pillow's NEAREST walk
};

// Pillow's support of each filter, in source pixels at scale 1.
FASTLOAD_HD float filter_support(Interpolation mode) {
  return mode == Interpolation::kBicubic ? 2.0f : 1.0f;
}

// Whether the resampled values can leave [0, 255] (negative weights), so that both passes
// clip as Pillow does.
FASTLOAD_HD bool clips(Interpolation mode) { return mode == Interpolation::kBicubic; }

// Whether the filter widens with the scale when shrinking (Pillow's antialiasing). A
// filter that does not must not be given a DCT-scaled decode either: the decoder's
// scaling averages blocks of pixels, an antialiasing of its own.
FASTLOAD_HD bool antialiases(Interpolation mode) { return mode != Interpolation::kBilinearNoAntialias; }

// Pillow's filterscale: how much wider than at scale 1 the filter reads at `scale`
// source pixels per output pixel.
FASTLOAD_HD double filter_scale(Interpolation mode, double scale) {
  return antialiases(mode) && scale > 1.0 ? scale : 1.0;
}

FASTLOAD_HD Axis make_axis(float box_start, float box_size, int in_size, int out_size,
                           Interpolation mode = Interpolation::kBilinear) {
  Axis axis;
  axis.start = box_start;
  axis.scale = box_size / static_cast<float>(out_size);
  // filter_scale() in float, as Pillow and torch compute it.
  const float widening = antialiases(mode) && axis.scale > 1.0f ? axis.scale : 1.0f;
  axis.support = filter_support(mode) * widening;
  axis.inv_filter_scale = 1.0f / widening;
  axis.in_size = in_size;
  axis.mode = mode;
  axis.step = static_cast<double>(box_size) / out_size;
  return axis;
}

// Source coordinate of the centre of output index i, rounded once to float. The product
// (i + 0.5) * scale is exact in double and so is the sum for any real image size, so
// the host's double expression and the device's fmaf give the same float, and
// fastload/reference.py reproduces it bit for bit (float64, then one cast).
FASTLOAD_HD float source_centre(const Axis& axis, int i) {
#if defined(__CUDA_ARCH__)
  return fmaf(static_cast<float>(i) + 0.5f, axis.scale, axis.start);
#else
  return static_cast<float>(static_cast<double>(axis.start) +
                            (static_cast<double>(i) + 0.5) * static_cast<double>(axis.scale));
#endif
}

// Padding rule: the output pixel exists only where its centre falls on the image.
// Compared in double: float(in_size) rounds (up, too) above 2^24.
FASTLOAD_HD bool centre_inside(const Axis& axis, float centre) {
  return centre >= 0.0f && static_cast<double>(centre) < static_cast<double>(axis.in_size);
}

// Pillow's (int)v (truncation toward zero) for a tap bound, clamped to [0, in_size) on
// integers. A float clamp to float(in_size) is wrong above 2^24 px, where that float
// rounds up and lets the last tap read one pixel past the image; v beyond the int range
// (huge boxes) or NaN must not reach the float -> int conversion either.
FASTLOAD_HD int tap_bound(float v, int in_size) {
  if (!(v > 0.0f)) return 0;                         // negative, zero or NaN
  if (v >= 2147483648.0f) return in_size;            // 2^31: beyond every int
  const int i = static_cast<int>(v);
  return i < in_size ? i : in_size;
}

// Pillow's triangle ("bilinear") filter.
FASTLOAD_HD float triangle(float x) {
  x = fabsf(x);
  return x < 1.0f ? 1.0f - x : 0.0f;
}

// Pillow's bicubic filter: Keys' cubic convolution with a = -0.5, support 2.
FASTLOAD_HD float cubic(float x) {
  constexpr float a = -0.5f;
  x = fabsf(x);
  if (x < 1.0f) return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
  if (x < 2.0f) return (((x - 5.0f) * x + 8.0f) * x - 4.0f) * a;
  return 0.0f;
}

// Unnormalised weight of source pixel j for an output pixel centred at `centre`.
FASTLOAD_HD float tap_weight(const Axis& axis, float centre, int j) {
  const float x = (static_cast<float>(j) + 0.5f - centre) * axis.inv_filter_scale;
  switch (axis.mode) {
    case Interpolation::kBicubic: return cubic(x);
    case Interpolation::kNearest: return 1.0f;
    default: return triangle(x);
  }
}

// The taps of one output coordinate: source pixels [first, first + count), weights
// tap_weight(...) * norm. count == 0 marks padding (centre outside the image).
struct Taps {
  float centre;
  int first;
  int count;
  float norm;  // 1 / sum of the weights
};

// Pillow's NEAREST coordinates: x_0 = start + step / 2 (exact: a power-of-two product),
// then x_{i+1} = x_i + step. The CPU kernel walks them once per axis (nearest_origin,
// then += step); the device and fastload/reference.py add up to i the same way.
FASTLOAD_HD double nearest_origin(const Axis& axis) { return static_cast<double>(axis.start) + axis.step * 0.5; }

FASTLOAD_HD double nearest_coordinate(const Axis& axis, int i) {
  double x = nearest_origin(axis);
  for (int k = 0; k < i; ++k) x += axis.step;
  return x;
}

// The one tap of a NEAREST coordinate x: pixel (int)x, or padding where x lies outside
// [0, in_size) (Pillow fills those with 0 too).
FASTLOAD_HD Taps nearest_taps(const Axis& axis, double x) {
  Taps taps;
  taps.centre = static_cast<float>(x);
  taps.first = 0;
  taps.count = 0;
  taps.norm = 0.0f;
  if (!(x >= 0.0) || !(x < static_cast<double>(axis.in_size))) return taps;
  taps.first = static_cast<int>(x);
  taps.count = 1;
  taps.norm = 1.0f;
  return taps;
}

FASTLOAD_HD Taps compute_taps(const Axis& axis, int i) {
  if (axis.mode == Interpolation::kNearest) return nearest_taps(axis, nearest_coordinate(axis, i));
  Taps taps;
  taps.centre = source_centre(axis, i);
  taps.first = 0;
  taps.count = 0;
  taps.norm = 0.0f;
  if (!centre_inside(axis, taps.centre)) return taps;
  // Pillow writes (int)(centre -/+ support + 0.5): truncation toward zero, then clamps
  // to the image (tap_bound: on integers, so never past the image).
  taps.first = tap_bound(taps.centre - axis.support + 0.5f, axis.in_size);
  const int last = tap_bound(taps.centre + axis.support + 0.5f, axis.in_size);
  taps.count = last > taps.first ? last - taps.first : 0;
  float sum = 0.0f;
  for (int k = 0; k < taps.count; ++k) sum += tap_weight(axis, taps.centre, taps.first + k);
  // The pixel under an inside centre is always a tap, with the filter's largest weights
  // (>= 0.5 triangle, >= 0.56 cubic), and the cubic's negative lobes are smaller: sum > 0.
  taps.norm = sum != 0.0f ? 1.0f / sum : 0.0f;
  return taps;
}

// The value range of a resampled pass, where the filter can leave it (clips()).
FASTLOAD_HD float clip_pixel(float v) {
  v = v > 0.0f ? v : 0.0f;
  return v < 255.0f ? v : 255.0f;
}

// ---- casts to the output dtype ---------------------------------------------------------
// Written as ternaries (not fminf/fmaxf) so that g++ vectorises them into min/max; a NaN
// (impossible for finite mean/std) becomes 0.

// Saturate to [0, 255], then round half away from zero. Adding the largest float below
// 0.5 and truncating is exact for every v >= 0 (v + 0.5f would round 0.49999997 to 1).
FASTLOAD_HD uint8_t to_uint8(float v) {
  v = v > 0.0f ? v : 0.0f;
  v = v < 255.0f ? v : 255.0f;
  return static_cast<uint8_t>(static_cast<int>(v + 0.49999997f));
}

// Round to nearest even, the same bits as c10::BFloat16(float) and torch's .to(bfloat16),
// written on integers so that the CPU loops vectorise.
FASTLOAD_HD uint16_t to_bfloat16_bits(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  if (v != v) return 0x7FC0;  // canonical quiet NaN, as c10
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// Round to nearest even, the same bits as c10::Half(float) and torch's .to(float16). The
// device uses the hardware conversion; the host has c10's own bit recipe (Maratyszcza's
// FP16 library, the one c10 uses without F16C) written so that g++ vectorises the CPU
// loops (c10's copy does not).
FASTLOAD_HD uint16_t to_half_bits(float v) {
#if defined(__CUDA_ARCH__)
  return c10::Half(v).x;
#else
  const uint32_t scale_to_inf_bits = 239u << 23, scale_to_zero_bits = 17u << 23;
  float scale_to_inf, scale_to_zero;
  memcpy(&scale_to_inf, &scale_to_inf_bits, sizeof(float));
  memcpy(&scale_to_zero, &scale_to_zero_bits, sizeof(float));
  uint32_t w;
  memcpy(&w, &v, sizeof(w));
  const uint32_t abs_bits = w & 0x7FFFFFFFu;
  float abs_v;
  memcpy(&abs_v, &abs_bits, sizeof(float));
  float base = (abs_v * scale_to_inf) * scale_to_zero;
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  const uint32_t bias_bits = (bias >> 1) + 0x07800000u;
  float bias_v;
  memcpy(&bias_v, &bias_bits, sizeof(float));
  base = bias_v + base;
  uint32_t bits;
  memcpy(&bits, &base, sizeof(bits));
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  // NaN -> 0x7E00, as a mask: g++ does not if-convert the ternary (control flow).
  const uint32_t nan_mask = 0u - static_cast<uint32_t>(shl1_w > 0xFF000000u);
  return static_cast<uint16_t>((sign >> 16) | (nan_mask & 0x7E00u) | (~nan_mask & nonsign));
#endif
}

// to_uint8 for |v| < 2^31, where the float -> int conversion is defined: it clamps on
// integers, which g++ vectorises (the float clamp of to_uint8 it does not). Same results.
FASTLOAD_HD uint8_t to_uint8_bounded(float v) {
  int i = static_cast<int>(v + 0.49999997f);
  i = i > 0 ? i : 0;
  i = i < 255 ? i : 255;
  return static_cast<uint8_t>(i);
}

// Output element types by their storage: the CPU kernel stores through these so the
// 16-bit casts stay integer code.
template <typename T>
struct Cast;
template <>
struct Cast<uint8_t> {
  using Storage = uint8_t;
  static FASTLOAD_HD Storage apply(float v) { return to_uint8(v); }
};
template <>
struct Cast<float> {
  using Storage = float;
  static FASTLOAD_HD Storage apply(float v) { return v; }
};
template <>
struct Cast<c10::Half> {
  using Storage = uint16_t;
  static FASTLOAD_HD Storage apply(float v) { return to_half_bits(v); }
};
template <>
struct Cast<c10::BFloat16> {
  using Storage = uint16_t;
  static FASTLOAD_HD Storage apply(float v) { return to_bfloat16_bits(v); }
};

}  // namespace fastload::augment
