// Per-pixel colour math: ColorJitter (brightness, contrast, saturation, hue), Grayscale
// and RandomErasing, shared by the CPU ops (color_cpu.cpp) and, later, the fused kernels.
//
// Everything here is FASTLOAD_HD, pure arithmetic on one pixel (no containers, no
// exceptions), so the CPU tests check the very code a CUDA kernel would run.
//
// Two semantics, chosen by the pixel type:
//   uint8 pixels  -> torchvision's PIL path, which is what ImageFolder pipelines run
//                    (the loader gives PIL images; ColorJitter comes after the resize):
//                    PIL ImageEnhance blends, truncated to uint8 after each op; the
//                    contrast mean of the "L" image rounded as PIL does; hue through PIL's
//                    uint8 HSV. Bit-exact to Pillow's C code (Blend.c, Convert.c).
//   float pixels  -> torchvision's tensor path on float images in [0, 1]
//                    (v2.functional / _functional_tensor): blends clamped to [0, 1], grey
//                    = 0.2989 R + 0.587 G + 0.114 B, hue through float HSV.
// Where the two differ: PIL truncates every op's result to uint8 and uses the luma
// (19595 R + 38470 G + 7471 B + 2^15) >> 16 for grey; the tensor path keeps floats and
// uses 0.2989 / 0.587 / 0.114 (which do not even sum to 1). PIL's contrast mean is an
// integer; the tensor one is not. PIL's hue shift is int(hue * 255) levels of a uint8
// hue, the tensor path adds hue to a float hue. torchvision's tensor path on uint8
// tensors is a third variant (floats truncated back to uint8 after each op) that is not
// implemented here.
//
// Rounding: the PIL functions reproduce C float/double expressions whose every product
// and sum is rounded on its own. A fused multiply-add (nvcc contracts by default; g++
// does under target("fma")) would round once and move a value across an integer now and
// then, so the device code uses the explicitly rounded intrinsics, and the host rounds
// each product where it is made (host_opaque: computing it in double and rounding to
// float is not enough, g++ narrows that back to a float product and fuses it).
#pragma once

#include <cmath>
#include <cstdint>

#include "../host_device.h"

namespace fastload::augment::color {

// The ColorJitter ops, numbered as torchvision's fn_idx.
enum ColorOp : int { kBrightness = 0, kContrast = 1, kSaturation = 2, kHue = 3 };

// ---- exactly rounded arithmetic ---------------------------------------------------------

// fl32(a * b), fl32(a + b): one rounding each, never fused.
FASTLOAD_HD_INLINE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return host_opaque(a * b);
#endif
}

FASTLOAD_HD_INLINE float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;  // an add has nothing to fuse with once its operands are rounded
#endif
}

// fl64(a * b), never fused into a following add (only the one PIL expression that
// would be a multiply-subtract needs it).
FASTLOAD_HD_INLINE double dmul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return host_opaque(a * b);
#endif
}

// ---- PIL (uint8) ------------------------------------------------------------------------

// Pillow's ImagingBlend: (UINT8)(in1 + alpha * (in2 - in1)) in float, clipped to
// [0, 255] when extrapolating (inside [0, 1] the value cannot leave it), truncated.
// alpha is the factor as C float (Pillow takes a double and narrows it). NaN -> 0.
FASTLOAD_HD_INLINE uint8_t pil_blend(uint8_t degenerate, uint8_t value, float alpha) {
  const float diff = static_cast<float>(static_cast<int>(value) - static_cast<int>(degenerate));
  const float t = add_rn(static_cast<float>(degenerate), mul_rn(alpha, diff));
  if (!(t > 0.0f)) return 0;
  if (t >= 255.0f) return 255;
  return static_cast<uint8_t>(static_cast<int>(t));
}

// Pillow's RGB -> "L": ITU-R 601-2 luma in 16-bit fixed point, rounded.
FASTLOAD_HD_INLINE uint8_t pil_luma(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

// The "L" value of a pixel of 1 (already "L") or 3 channels.
FASTLOAD_HD_INLINE uint8_t pil_luma(const uint8_t* px, int channels) {
  return channels == 3 ? pil_luma(px[0], px[1], px[2]) : px[0];
}

// ImageEnhance.Contrast's grey level: int(ImageStat mean of the "L" image + 0.5), the
// mean being sum / count in double (exact: the sum stays far below 2^53).
FASTLOAD_HD int pil_contrast_mean(uint64_t luma_sum, int64_t pixel_count) {
  if (pixel_count <= 0) return 0;
  return static_cast<int>(static_cast<double>(luma_sum) / static_cast<double>(pixel_count) + 0.5);
}

// ImageEnhance.Brightness: blend with black.
FASTLOAD_HD void pil_brightness(uint8_t* px, int channels, float factor) {
  for (int c = 0; c < channels; ++c) px[c] = pil_blend(0, px[c], factor);
}

// ImageEnhance.Contrast: blend with the uniform grey `mean` (pil_contrast_mean of the
// image as it is when contrast runs).
FASTLOAD_HD void pil_contrast(uint8_t* px, int channels, float factor, int mean) {
  const uint8_t grey = static_cast<uint8_t>(mean);
  for (int c = 0; c < channels; ++c) px[c] = pil_blend(grey, px[c], factor);
}

// ImageEnhance.Color: blend with the pixel's own "L" (identity on an "L" image, whose
// degenerate is the image itself).
FASTLOAD_HD void pil_saturation(uint8_t* px, int channels, float factor) {
  if (channels != 3) return;
  const uint8_t grey = pil_luma(px[0], px[1], px[2]);
  for (int c = 0; c < 3; ++c) px[c] = pil_blend(grey, px[c], factor);
}

FASTLOAD_HD_INLINE int clip8(int v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }

// Pillow's rgb2hsv (Convert.c), its float and double steps as written there.
FASTLOAD_HD void pil_rgb_to_hsv(uint8_t r, uint8_t g, uint8_t b, uint8_t* hsv) {
  const uint8_t maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
  const uint8_t minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
  hsv[2] = maxc;
  if (minc == maxc) {
    hsv[0] = 0;
    hsv[1] = 0;
    return;
  }
  const float cr = static_cast<float>(maxc - minc);
  const float s = cr / static_cast<float>(maxc);
  const float rc = static_cast<float>(maxc - r) / cr;
  const float gc = static_cast<float>(maxc - g) / cr;
  const float bc = static_cast<float>(maxc - b) / cr;
  float h;
  if (r == maxc) {
    h = bc - gc;
  } else if (g == maxc) {
    h = static_cast<float>(2.0 + static_cast<double>(rc) - static_cast<double>(bc));
  } else {
    h = static_cast<float>(4.0 + static_cast<double>(gc) - static_cast<double>(rc));
  }
  // fmod(t, 1.0) for t = h / 6 + 1 in [5/6, 11/6] (h in [-1, 5]): t - 1 from 1 on, which
  // is exact, so the libm call is not needed for the same value.
  const double t = static_cast<double>(h) / 6.0 + 1.0;
  h = static_cast<float>(t >= 1.0 ? t - 1.0 : t);
  hsv[0] = static_cast<uint8_t>(clip8(static_cast<int>(static_cast<double>(h) * 255.0)));
  hsv[1] = static_cast<uint8_t>(clip8(static_cast<int>(static_cast<double>(s) * 255.0)));
}

// C's round (half away from zero) for 0 <= x < 2^31, without libm: x - trunc(x) is
// exact there, so comparing it with 0.5 is what round does.
FASTLOAD_HD_INLINE int round_nonnegative(double x) {
  const int t = static_cast<int>(x);
  return t + (x - static_cast<double>(t) >= 0.5 ? 1 : 0);
}

// Pillow's hsv2rgb (Convert.c). h6 >= 0, so floor is the truncation, and every rounded
// product below is non-negative (fs, f in [0, 1]).
FASTLOAD_HD void pil_hsv_to_rgb(uint8_t h, uint8_t s, uint8_t v, uint8_t* rgb) {
  if (s == 0) {
    rgb[0] = rgb[1] = rgb[2] = v;
    return;
  }
  const double h6 = static_cast<double>(h) * 6.0 / 255.0;
  const int i = static_cast<int>(h6);
  const float f = static_cast<float>(h6 - static_cast<double>(i));
  const float fs = static_cast<float>(static_cast<double>(s) / 255.0);
  const double vd = static_cast<double>(v);
  const uint8_t up = static_cast<uint8_t>(clip8(round_nonnegative(vd * (1.0 - fs))));
  const uint8_t uq = static_cast<uint8_t>(clip8(round_nonnegative(vd * (1.0 - mul_rn(fs, f)))));
  const uint8_t ut =
      static_cast<uint8_t>(clip8(round_nonnegative(vd * (1.0 - dmul_rn(fs, 1.0 - static_cast<double>(f))))));
  switch (i % 6) {
    case 0: rgb[0] = v; rgb[1] = ut; rgb[2] = up; break;
    case 1: rgb[0] = uq; rgb[1] = v; rgb[2] = up; break;
    case 2: rgb[0] = up; rgb[1] = v; rgb[2] = ut; break;
    case 3: rgb[0] = up; rgb[1] = uq; rgb[2] = v; break;
    case 4: rgb[0] = ut; rgb[1] = up; rgb[2] = v; break;
    default: rgb[0] = v; rgb[1] = up; rgb[2] = uq; break;
  }
}

// torchvision's PIL adjust_hue adds np.int32(hue_factor * 255).astype(uint8) to the
// uint8 hue: truncation toward zero, then modulo 256.
FASTLOAD_HD uint8_t pil_hue_shift(float hue_factor) {
  return static_cast<uint8_t>(static_cast<uint32_t>(static_cast<int>(static_cast<double>(hue_factor) * 255.0)));
}

// adjust_hue on one pixel: RGB -> HSV, h += shift (mod 256), -> RGB. Identity for "L".
FASTLOAD_HD void pil_hue(uint8_t* px, int channels, uint8_t shift) {
  if (channels != 3) return;
  uint8_t hsv[3];
  pil_rgb_to_hsv(px[0], px[1], px[2], hsv);
  pil_hsv_to_rgb(static_cast<uint8_t>(hsv[0] + shift), hsv[1], hsv[2], px);
}

// Grayscale / RandomGrayscale: convert("L"), copied to every output channel (3 for
// num_output_channels=3). `out` may alias `px`.
FASTLOAD_HD_INLINE void pil_grayscale(const uint8_t* px, int channels, uint8_t* out, int out_channels) {
  const uint8_t grey = pil_luma(px, channels);
  for (int c = 0; c < out_channels; ++c) out[c] = grey;
}

// ---- tensor path (float in [0, 1]) ------------------------------------------------------

FASTLOAD_HD float clamp01(float v) { return v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f; }

// v2's _rgb_to_grayscale_image weights.
FASTLOAD_HD float tv_grey(const float* px, int channels) {
  return channels == 3 ? px[0] * 0.2989f + px[1] * 0.587f + px[2] * 0.114f : px[0];
}

// _blend: clamp(a * ratio + b * (1 - ratio), 0, 1).
FASTLOAD_HD float tv_blend(float value, float other, float ratio) {
  return clamp01(value * ratio + other * (1.0f - ratio));
}

FASTLOAD_HD void tv_brightness(float* px, int channels, float factor) {
  for (int c = 0; c < channels; ++c) px[c] = clamp01(px[c] * factor);
}

// `mean`: the mean of tv_grey over the image as it is when contrast runs.
FASTLOAD_HD void tv_contrast(float* px, int channels, float factor, float mean) {
  for (int c = 0; c < channels; ++c) px[c] = tv_blend(px[c], mean, factor);
}

FASTLOAD_HD void tv_saturation(float* px, int channels, float factor) {
  if (channels != 3) return;  // torchvision: "Match PIL behaviour"
  const float grey = tv_grey(px, 3);
  for (int c = 0; c < 3; ++c) px[c] = tv_blend(px[c], grey, factor);
}

// v2's _rgb_to_hsv, shift, _hsv_to_rgb on one pixel. Identity for 1 channel.
FASTLOAD_HD void tv_hue(float* px, int channels, float hue_factor) {
  if (channels != 3) return;
  const float r = px[0], g = px[1], b = px[2];
  const float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
  const bool eqc = maxc == minc;
  const float range = maxc - minc;
  const float s = range / (eqc ? 1.0f : maxc);
  const float divisor = eqc ? 1.0f : range;
  const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
  float h;
  if (maxc == r) {
    h = bc - gc;
  } else if (maxc == g) {
    h = rc + 2.0f - bc;
  } else {
    h = gc + 4.0f - rc;
  }
  h = fmodf(h * (1.0f / 6.0f) + 1.0f, 1.0f);
  // remainder_(1.0): Python's modulo, non-negative.
  h += hue_factor;
  h = h - floorf(h);
  const float h6 = h * 6.0f;
  const float i_f = floorf(h6);
  const float f = h6 - i_f;
  int i = static_cast<int>(i_f) % 6;
  if (i < 0) i += 6;
  const float v = maxc;
  const float p = clamp01((1.0f - s) * v);
  const float q = clamp01((1.0f - s * f) * v);
  const float t = clamp01((s * f + (1.0f - s)) * v);
  switch (i) {
    case 0: px[0] = v; px[1] = t; px[2] = p; break;
    case 1: px[0] = q; px[1] = v; px[2] = p; break;
    case 2: px[0] = p; px[1] = v; px[2] = t; break;
    case 3: px[0] = p; px[1] = q; px[2] = v; break;
    case 4: px[0] = t; px[1] = p; px[2] = v; break;
    default: px[0] = v; px[1] = p; px[2] = q; break;
  }
}

FASTLOAD_HD void tv_grayscale(const float* px, int channels, float* out, int out_channels) {
  const float grey = tv_grey(px, channels);
  for (int c = 0; c < out_channels; ++c) out[c] = grey;
}

// ---- ColorJitter: the four ops in their drawn order --------------------------------------

// One sample's jitter: order[k] is the ColorOp applied k-th; enabled[op] false where
// torchvision's factor is None (the op is skipped, not run with a neutral factor: a hue
// of 0 would still round-trip through HSV).
struct JitterParams {
  int order[4];
  float factor[4];
  bool enabled[4];
};

// Position (0..4) in `order` of contrast, or 4 when contrast does not run: the ops
// before it are the prefix whose result the contrast mean is taken of.
FASTLOAD_HD_INLINE int contrast_position(const JitterParams& p) {
  if (!p.enabled[kContrast]) return 4;
  for (int k = 0; k < 4; ++k)
    if (p.order[k] == kContrast) return k;
  return 4;
}

// Applies the ops order[begin .. end) to one uint8 pixel; `mean` is the contrast grey
// (used only when contrast is in the range).
FASTLOAD_HD void pil_jitter(uint8_t* px, int channels, const JitterParams& p, int begin, int end, int mean) {
  for (int k = begin; k < end; ++k) {
    const int op = p.order[k];
    if (op < 0 || op > 3 || !p.enabled[op]) continue;
    const float f = p.factor[op];
    if (op == kBrightness) pil_brightness(px, channels, f);
    else if (op == kContrast) pil_contrast(px, channels, f, mean);
    else if (op == kSaturation) pil_saturation(px, channels, f);
    else pil_hue(px, channels, pil_hue_shift(f));
  }
}

// The same on one float pixel (tensor semantics).
FASTLOAD_HD void tv_jitter(float* px, int channels, const JitterParams& p, int begin, int end, float mean) {
  for (int k = begin; k < end; ++k) {
    const int op = p.order[k];
    if (op < 0 || op > 3 || !p.enabled[op]) continue;
    const float f = p.factor[op];
    if (op == kBrightness) tv_brightness(px, channels, f);
    else if (op == kContrast) tv_contrast(px, channels, f, mean);
    else if (op == kSaturation) tv_saturation(px, channels, f);
    else tv_hue(px, channels, f);
  }
}

// ---- RandomErasing ----------------------------------------------------------------------

// The erased rectangle of one sample, in output pixels; height or width 0: none.
struct EraseBox {
  int top, left, height, width;
};

FASTLOAD_HD_INLINE bool erase_covers(const EraseBox& box, int y, int x) {
  return y >= box.top && y < box.top + box.height && x >= box.left && x < box.left + box.width;
}

// Index of element (c, y, x) of the erased patch in torchvision's [C, h, w] value
// tensor: the counter of its random normal.
FASTLOAD_HD int64_t erase_element(const EraseBox& box, int c, int y, int x) {
  return (static_cast<int64_t>(c) * box.height + (y - box.top)) * box.width + (x - box.left);
}

}  // namespace fastload::augment::color
