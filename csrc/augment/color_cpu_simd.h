// The colour ops' uint8 row loops on 8-lane vectors, for the AVX2 build of the fused
// CPU pass (color_stage_cpu_impl.h and resample_pil_cpu_impl.h include it after
// simd_cpu.h, which defines FASTLOAD_INLINE and FASTLOAD_SHUFFLEVECTOR): the per-pixel
// math of color.h eight pixels or sixteen values a step, the same IEEE operations in the
// same order, so bit for bit; each loop ends with color.h's scalar code for the rest of
// the row. GCC vector extensions, so the same source compiles for any target; the
// kernel calls them only from its AVX2 instantiation (WIDE), where they are fast.
//
// Byte <-> int lanes go through byte shuffles that stay inside each 128-bit half (one
// vpshufb each): g++'s __builtin_convertvector between byte and int vectors goes through
// scalars.
#pragma once

#include <cstdint>
#include <cstring>

#include "../host_device.h"
#include "color.h"

#if defined(FASTLOAD_SHUFFLEVECTOR)
namespace fastload::augment::color::simd {

typedef uint8_t Bytes16 __attribute__((vector_size(16)));
typedef uint8_t Bytes32 __attribute__((vector_size(32)));
typedef int32_t Ints8 __attribute__((vector_size(32)));
typedef float Floats8 __attribute__((vector_size(32)));

struct Rgb8 {
  Ints8 r, g, b;
};

FASTLOAD_INLINE Bytes16 load16(const uint8_t* p) {
  Bytes16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// v in both 128-bit halves, so that an in-half shuffle can take any of its bytes.
FASTLOAD_INLINE Bytes32 both_halves(Bytes16 v) {
  return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8,
                                 9, 10, 11, 12, 13, 14, 15);
}

// Pixels px[0, 8), deinterleaved. Reads 28 bytes (pixels 0-4 and 4-8 as two 16-byte
// loads, so that each 128-bit half holds its own four pixels and every shuffle stays in
// its half): the caller leaves 4 bytes after pixel 7.
FASTLOAD_INLINE Rgb8 load_rgb8(const uint8_t* px) {
  const Bytes32 v = __builtin_shufflevector(load16(px), load16(px + 12), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                            14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
  const Bytes32 z = {};
  // Byte c of pixel k, zero-extended into lane k (index 32: a zero byte of z).
#define FASTLOAD_LANES(c)                                                                                     \
  __builtin_shufflevector(v, z, c, 32, 32, 32, c + 3, 32, 32, 32, c + 6, 32, 32, 32, c + 9, 32, 32, 32, c + 16, \
                          32, 32, 32, c + 19, 32, 32, 32, c + 22, 32, 32, 32, c + 25, 32, 32, 32)
  const Bytes32 r = FASTLOAD_LANES(0), g = FASTLOAD_LANES(1), b = FASTLOAD_LANES(2);
#undef FASTLOAD_LANES
  return {reinterpret_cast<const Ints8&>(r), reinterpret_cast<const Ints8&>(g), reinterpret_cast<const Ints8&>(b)};
}

// Values 0..255 back to 24 interleaved bytes (writes exactly px[0, 24)).
FASTLOAD_INLINE void store_rgb8(const Rgb8& v, uint8_t* px) {
  const Ints8 rgbx = v.r | (v.g << 8) | (v.b << 16);
  const Bytes32 bytes = reinterpret_cast<const Bytes32&>(rgbx);
  const Bytes32 rgb = __builtin_shufflevector(bytes, bytes, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 3, 7, 11, 15, 16,
                                              17, 18, 20, 21, 22, 24, 25, 26, 28, 29, 30, 19, 23, 27, 31);
  const Bytes16 lo = __builtin_shufflevector(rgb, rgb, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const Bytes16 hi = __builtin_shufflevector(rgb, rgb, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
  std::memcpy(px, &lo, 16);  // its last 4 bytes are pixel 4's and 5's, which `hi` writes next
  std::memcpy(px + 12, &hi, 12);
}

// pil_luma of eight pixels.
FASTLOAD_INLINE Ints8 pil_luma8(const Rgb8& v) { return (v.r * 19595 + v.g * 38470 + v.b * 7471 + 0x8000) >> 16; }

// pil_blend of eight values: two float roundings (mul_rn's, add_rn's), clipped, truncated.
FASTLOAD_INLINE Ints8 pil_blend8(Ints8 degenerate, Ints8 value, Floats8 alpha) {
  const Floats8 d = __builtin_convertvector(degenerate, Floats8);
  Floats8 t = d + host_opaque(alpha * (__builtin_convertvector(value, Floats8) - d));
  const Floats8 zero = {}, top = zero + 255.0f;
  t = t > zero ? t : zero;
  t = t < top ? t : top;
  return __builtin_convertvector(t, Ints8);
}

// ImageEnhance.Color (pil_saturation) over n RGB pixels.
FASTLOAD_INLINE void pil_saturation_row8(uint8_t* px, int n, float factor) {
  const Floats8 alpha = Floats8{} + factor;
  int i = 0;
  for (; i + 10 <= n; i += 8) {  // load_rgb8 reads 4 bytes past the 8 pixels
    const Rgb8 v = load_rgb8(px + 3 * i);
    const Ints8 grey = pil_luma8(v);
    store_rgb8({pil_blend8(grey, v.r, alpha), pil_blend8(grey, v.g, alpha), pil_blend8(grey, v.b, alpha)}, px + 3 * i);
  }
  for (; i < n; ++i) pil_saturation(px + 3 * i, 3, factor);
}

// Sixteen bytes zero-extended into two 8-lane vectors (values 0-7, 8-15) and back: byte
// shuffles inside each 128-bit half and one dword permute.
FASTLOAD_INLINE void widen16(Bytes16 v, Ints8& lo, Ints8& hi) {
  const Bytes32 vv = both_halves(v);
  const Bytes32 z = {};
  const Bytes32 a = __builtin_shufflevector(vv, z, 0, 32, 32, 32, 1, 32, 32, 32, 2, 32, 32, 32, 3, 32, 32, 32,  //
                                            20, 32, 32, 32, 21, 32, 32, 32, 22, 32, 32, 32, 23, 32, 32, 32);
  const Bytes32 b = __builtin_shufflevector(vv, z, 8, 32, 32, 32, 9, 32, 32, 32, 10, 32, 32, 32, 11, 32, 32, 32,  //
                                            28, 32, 32, 32, 29, 32, 32, 32, 30, 32, 32, 32, 31, 32, 32, 32);
  lo = reinterpret_cast<const Ints8&>(a);
  hi = reinterpret_cast<const Ints8&>(b);
}

// lo, hi: values 0..255.
FASTLOAD_INLINE Bytes16 narrow16(Ints8 lo, Ints8 hi) {
  const Ints8 both = lo | (hi << 8);
  const Bytes32 bytes = reinterpret_cast<const Bytes32&>(both);
  const Bytes32 halves = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 1, 5, 9, 13, 2, 3, 6, 7, 10, 11, 14, 15, 16,
                                                 20, 24, 28, 17, 21, 25, 29, 18, 19, 22, 23, 26, 27, 30, 31);
  const Ints8 dwords = reinterpret_cast<const Ints8&>(halves);
  const Ints8 ordered = __builtin_shufflevector(dwords, dwords, 0, 4, 1, 5, 2, 3, 6, 7);
  const Bytes32 out = reinterpret_cast<const Bytes32&>(ordered);
  return __builtin_shufflevector(out, out, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// pil_blend(degenerate, v, factor) of every value px[0, n), one degenerate for all
// (brightness: 0, contrast: the mean).
FASTLOAD_INLINE void pil_blend_row8(uint8_t* px, int n, int degenerate, float factor) {
  const Floats8 alpha = Floats8{} + factor;
  const Ints8 grey = Ints8{} + degenerate;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    Ints8 lo, hi;
    widen16(load16(px + i), lo, hi);
    const Bytes16 out = narrow16(pil_blend8(grey, lo, alpha), pil_blend8(grey, hi, alpha));
    std::memcpy(px + i, &out, sizeof(out));
  }
  for (; i < n; ++i) px[i] = pil_blend(static_cast<uint8_t>(degenerate), px[i], factor);
}

// hrow[4x + c] = px[3x + c] for n RGB pixels (the spare lane 0): four pixels a step.
FASTLOAD_INLINE void rgb_to_rgbx_row8(const uint8_t* px, int n, float* hrow) {
  const Bytes32 z = {};
  int i = 0;
  for (; i + 6 <= n; i += 4) {  // reads 16 bytes: 4 past the four pixels
    const Bytes32 vv = both_halves(load16(px + 3 * i));
    const Bytes32 a = __builtin_shufflevector(vv, z, 0, 32, 32, 32, 1, 32, 32, 32, 2, 32, 32, 32, 32, 32, 32, 32,  //
                                              19, 32, 32, 32, 20, 32, 32, 32, 21, 32, 32, 32, 32, 32, 32, 32);
    const Bytes32 b = __builtin_shufflevector(vv, z, 6, 32, 32, 32, 7, 32, 32, 32, 8, 32, 32, 32, 32, 32, 32, 32,  //
                                              25, 32, 32, 32, 26, 32, 32, 32, 27, 32, 32, 32, 32, 32, 32, 32);
    const Floats8 fa = __builtin_convertvector(reinterpret_cast<const Ints8&>(a), Floats8);
    const Floats8 fb = __builtin_convertvector(reinterpret_cast<const Ints8&>(b), Floats8);
    std::memcpy(hrow + 4 * i, &fa, sizeof(fa));
    std::memcpy(hrow + 4 * i + 8, &fb, sizeof(fb));
  }
  for (; i < n; ++i) {
    hrow[4 * i] = px[3 * i];
    hrow[4 * i + 1] = px[3 * i + 1];
    hrow[4 * i + 2] = px[3 * i + 2];
  }
}

typedef double Doubles8 __attribute__((vector_size(64)));
typedef double Doubles4 __attribute__((vector_size(32)));

// host_opaque for a vector two registers wide.
FASTLOAD_INLINE Doubles8 host_opaque_pair(Doubles8 x) {
  const Doubles4 lo = host_opaque(__builtin_shufflevector(x, x, 0, 1, 2, 3));
  const Doubles4 hi = host_opaque(__builtin_shufflevector(x, x, 4, 5, 6, 7));
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
}

// round_nonnegative of eight values, as doubles.
FASTLOAD_INLINE Doubles8 round_nonnegative8(Doubles8 x) {
  const Doubles8 t = __builtin_convertvector(__builtin_convertvector(x, Ints8), Doubles8);
  return x - t >= 0.5 ? t + 1.0 : t;
}

// pil_hue of eight pixels (pil_rgb_to_hsv, the shift, pil_hsv_to_rgb), every float and
// double step as there: lanes of one branch each, the others' results discarded.
FASTLOAD_INLINE Rgb8 pil_hue8(const Rgb8& px, int shift) {
  const Ints8 r = px.r, g = px.g, b = px.b;
  const Ints8 maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
  const Ints8 minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
  const Ints8 one = Ints8{} + 1;
  const Ints8 grey = minc == maxc;  // -1 where h = s = 0
  // Greys divide by 1 instead of 0: their quotients are discarded.
  const Floats8 cr = __builtin_convertvector(grey ? one : maxc - minc, Floats8);
  const Floats8 s = cr / __builtin_convertvector(grey ? one : maxc, Floats8);
  const Doubles8 rc = __builtin_convertvector(__builtin_convertvector(maxc - r, Floats8) / cr, Doubles8);
  const Floats8 gc = __builtin_convertvector(maxc - g, Floats8) / cr;
  const Floats8 bc = __builtin_convertvector(maxc - b, Floats8) / cr;
  const Doubles8 gcd = __builtin_convertvector(gc, Doubles8), bcd = __builtin_convertvector(bc, Doubles8);
  const Floats8 h_r = bc - gc;
  const Floats8 h_g = __builtin_convertvector(2.0 + rc - bcd, Floats8);
  const Floats8 h_b = __builtin_convertvector(4.0 + gcd - rc, Floats8);
  const Floats8 h = r == maxc ? h_r : (g == maxc ? h_g : h_b);
  const Doubles8 t = __builtin_convertvector(h, Doubles8) / 6.0 + 1.0;
  const Doubles8 hf = __builtin_convertvector(__builtin_convertvector(t >= 1.0 ? t - 1.0 : t, Floats8), Doubles8);
  const Ints8 zero = {}, top = zero + 255;
  Ints8 hue = __builtin_convertvector(hf * 255.0, Ints8);
  Ints8 sat = __builtin_convertvector(__builtin_convertvector(s, Doubles8) * 255.0, Ints8);
  hue = grey ? zero : (hue < zero ? zero : (hue > top ? top : hue));
  sat = grey ? zero : (sat < zero ? zero : (sat > top ? top : sat));
  hue = (hue + shift) & 255;

  const Doubles8 h6 = __builtin_convertvector(hue, Doubles8) * 6.0 / 255.0;
  const Ints8 sector = __builtin_convertvector(h6, Ints8);
  const Floats8 f = __builtin_convertvector(h6 - __builtin_convertvector(sector, Doubles8), Floats8);
  const Floats8 fs = __builtin_convertvector(__builtin_convertvector(sat, Doubles8) / 255.0, Floats8);
  const Doubles8 fsd = __builtin_convertvector(fs, Doubles8);
  const Doubles8 vd = __builtin_convertvector(maxc, Doubles8);
  const Ints8 up = __builtin_convertvector(round_nonnegative8(vd * (1.0 - fsd)), Ints8);
  const Ints8 uq =
      __builtin_convertvector(round_nonnegative8(vd * (1.0 - __builtin_convertvector(host_opaque(fs * f), Doubles8))),
                              Ints8);
  const Ints8 ut = __builtin_convertvector(
      round_nonnegative8(vd * (1.0 - host_opaque_pair(fsd * (1.0 - __builtin_convertvector(f, Doubles8))))), Ints8);
  const Ints8 i = sector == 6 ? zero : sector;
  const Ints8 v = maxc;
  Rgb8 out;
  out.r = (i == 0) | (i == 5) ? v : (i == 1 ? uq : (i == 4 ? ut : up));
  out.g = (i == 1) | (i == 2) ? v : (i == 0 ? ut : (i == 3 ? uq : up));
  out.b = (i == 3) | (i == 4) ? v : (i == 2 ? ut : (i == 5 ? uq : up));
  const Ints8 flat = sat == 0;
  out.r = flat ? v : (out.r < zero ? zero : (out.r > top ? top : out.r));
  out.g = flat ? v : (out.g < zero ? zero : (out.g > top ? top : out.g));
  out.b = flat ? v : (out.b < zero ? zero : (out.b > top ? top : out.b));
  return out;
}

// adjust_hue (pil_hue) over n RGB pixels.
FASTLOAD_INLINE void pil_hue_row8(uint8_t* px, int n, uint8_t shift) {
  int i = 0;
  for (; i + 10 <= n; i += 8) store_rgb8(pil_hue8(load_rgb8(px + 3 * i), shift), px + 3 * i);
  for (; i < n; ++i) pil_hue(px + 3 * i, 3, shift);
}

// The sum of pil_luma over n RGB pixels.
FASTLOAD_INLINE uint64_t luma_sum_row8(const uint8_t* px, int n) {
  Ints8 sums = {};  // < 2^31: a lane adds 255 at most n / 8 times
  int i = 0;
  for (; i + 10 <= n; i += 8) sums += pil_luma8(load_rgb8(px + 3 * i));
  uint64_t sum = 0;
  for (int lane = 0; lane < 8; ++lane) sum += static_cast<uint32_t>(sums[lane]);
  for (; i < n; ++i) sum += pil_luma(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
  return sum;
}

}  // namespace fastload::augment::color::simd
#endif
