// AugMix on the CPU (augmix_cpu.h): torchvision's tensor-path ops, the chains and the
// mix; the ops fastload::augmix_step (one op on one image) and fastload::augmix_params
// (the per-sample draws).
#include "augment/augmix_cpu.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "augment/autoaugment_cpu.h"
#include "augment/value_vectors.h"
#include "augment/color.h"
#include "check.h"

namespace fastload {

namespace aa = augment::autoaugment;
namespace am = augment::augmix;
namespace color = augment::color;

using augment::at4;
using augment::Float4;
using augment::Int4;
using augment::kByteFloat;
using augment::load4;
using augment::mul4;

namespace {

// The value loops below are plain float expressions that the compiler vectorises: their
// products must stay apart from the adds, so they are compiled where no FMA exists (the
// baseline build, and an AVX2 clone without FMA, picked at run time); a build for a CPU
// with FMA (-march=native) rounds the products explicitly instead.
#if defined(__FMA__)
#define FASTLOAD_PRODUCT(a, b) color::mul_rn((a), (b))
#else
#define FASTLOAD_PRODUCT(a, b) ((a) * (b))
#endif

inline __attribute__((always_inline)) uint8_t clamp_truncate(float v) {
  return static_cast<uint8_t>(static_cast<int>(std::min(std::max(v, 0.0f), 255.0f)));
}

// _blend over n values: degenerate[i] (or the constant `fixed` where degenerate is null),
// clamped to [0, 255] and truncated, as am::tensor_blend value by value.
inline __attribute__((always_inline)) void blend_values_body(uint8_t* px, const uint8_t* degenerate, float fixed,
                                                             int64_t n, float ratio, float rest) {
  if (degenerate == nullptr) {
    const float constant = FASTLOAD_PRODUCT(rest, fixed);
    for (int64_t i = 0; i < n; ++i) px[i] = clamp_truncate(FASTLOAD_PRODUCT(ratio, static_cast<float>(px[i])) + constant);
  } else {
    for (int64_t i = 0; i < n; ++i)
      px[i] = clamp_truncate(FASTLOAD_PRODUCT(ratio, static_cast<float>(px[i])) +
                             FASTLOAD_PRODUCT(rest, static_cast<float>(degenerate[i])));
  }
}

// mix = weight * values (start), or mix + weight * values.
inline __attribute__((always_inline)) void mix_body(float* mix, const uint8_t* values, int64_t n, float weight,
                                                    bool start) {
  if (start) {
    for (int64_t i = 0; i < n; ++i) mix[i] = FASTLOAD_PRODUCT(weight, static_cast<float>(values[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) mix[i] = mix[i] + FASTLOAD_PRODUCT(weight, static_cast<float>(values[i]));
  }
}

inline __attribute__((always_inline)) void truncate_body(const float* mix, uint8_t* px, int64_t n) {
  for (int64_t i = 0; i < n; ++i) px[i] = clamp_truncate(mix[i]);  // .to(uint8): the weights sum to 1
}

#if defined(__x86_64__) && !defined(__FMA__)
#define FASTLOAD_AVX2_NO_FMA __attribute__((target("avx2")))
FASTLOAD_AVX2_NO_FMA void blend_values_avx2(uint8_t* px, const uint8_t* d, float fixed, int64_t n, float r, float q) {
  blend_values_body(px, d, fixed, n, r, q);
}
FASTLOAD_AVX2_NO_FMA void mix_avx2(float* mix, const uint8_t* values, int64_t n, float weight, bool start) {
  mix_body(mix, values, n, weight, start);
}
FASTLOAD_AVX2_NO_FMA void truncate_avx2(const float* mix, uint8_t* px, int64_t n) { truncate_body(mix, px, n); }
bool avx2_values() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#define FASTLOAD_VALUES(name, ...) (avx2_values() ? name##_avx2(__VA_ARGS__) : name##_body(__VA_ARGS__))
#else
#define FASTLOAD_VALUES(name, ...) name##_body(__VA_ARGS__)
#endif

void tensor_blend_values(uint8_t* px, const uint8_t* degenerate, float fixed, int64_t n, float ratio, float rest) {
  FASTLOAD_VALUES(blend_values, px, degenerate, fixed, n, ratio, rest);
}

// torchvision's tensor-path affine (F.affine / F.rotate on a tensor -> _gen_affine_grid
// -> grid_sample, zeros padding) of src into dst, HWC. grid_sample's values as torch's
// vectorised CPU kernel makes them, whose multiply-adds are fused (its AVX2 and AVX-512
// builds): the source coordinate and the four-corner sum through fma; the ties at .5
// that a bilinear shear makes on whole rows round as torch rounds them only so.
inline __attribute__((always_inline)) void tensor_affine_body(const uint8_t* src, uint8_t* dst, int h, int w, int C,
                                                              const double* m, bool bilinear) {
  using color::mul_rn;
  // theta (float32) transposed and divided by (0.5 w, 0.5 h): the grid's 3x2 matrix.
  const float half_w = 0.5f * static_cast<float>(w), half_h = 0.5f * static_cast<float>(h);
  const float r00 = static_cast<float>(m[0]) / half_w, r10 = static_cast<float>(m[1]) / half_w;
  const float r20 = static_cast<float>(m[2]) / half_w;
  const float r01 = static_cast<float>(m[3]) / half_h, r11 = static_cast<float>(m[4]) / half_h;
  const float r21 = static_cast<float>(m[5]) / half_h;
  const float scale_w = static_cast<float>(w) / 2.0f, scale_h = static_cast<float>(h) / 2.0f;
  // The source inside a border of 2 zero pixels: a corner outside the image reads 0
  // (grid_sample's zeros) once its coordinate is clamped into [-2, size + 1].
  constexpr int kBorder = 2;
  const int64_t padded_row = static_cast<int64_t>(w + 2 * kBorder) * C, row = static_cast<int64_t>(w) * C;
  thread_local std::vector<uint8_t> padded;
  thread_local std::vector<float> ixs, iys;
  padded.assign(static_cast<size_t>(h + 2 * kBorder) * padded_row, 0);
  for (int y = 0; y < h; ++y)
    std::memcpy(padded.data() + (y + kBorder) * padded_row + kBorder * C, src + y * row, row);
  ixs.resize(static_cast<size_t>(w) + 4);
  iys.resize(static_cast<size_t>(w) + 4);
  const Float4 c00 = {r00, r00, r00, r00}, c10 = {r10, r10, r10, r10}, c20 = {r20, r20, r20, r20};
  const Float4 c01 = {r01, r01, r01, r01}, c11 = {r11, r11, r11, r11}, c21 = {r21, r21, r21, r21};
  for (int y = 0; y < h; ++y) {
    const float by = static_cast<float>(y) + 0.5f - half_h;  // exact: half-integers
    const Float4 vy = {by, by, by, by};
    // The grid row, four points a step: (bx r00 + by r10) + r20, each product rounded.
    for (int x = 0; x < w; x += 4) {
      const float b0 = static_cast<float>(x) + 0.5f - half_w;
      const Float4 vx = {b0, b0 + 1.0f, b0 + 2.0f, b0 + 3.0f};  // exact: half-integers
      const Float4 gx = (mul4(vx, c00) + mul4(vy, c10)) + c20, gy = (mul4(vx, c01) + mul4(vy, c11)) + c21;
      for (int k = 0; k < 4; ++k) {
        ixs[x + k] = std::fma(gx[k] + 1.0f, scale_w, -0.5f);
        iys[x + k] = std::fma(gy[k] + 1.0f, scale_h, -0.5f);
      }
    }
    uint8_t* out = dst + y * row;
    for (int x = 0; x < w; ++x, out += C) {
      const float ix = ixs[x], iy = iys[x];
      if (!bilinear) {  // nearest: nearbyint (half to even), zeros outside
        const float nx = std::nearbyint(ix), ny = std::nearbyint(iy);
        if (nx >= 0 && nx < w && ny >= 0 && ny < h) {
          std::memcpy(out, src + static_cast<int64_t>(ny) * row + static_cast<int64_t>(nx) * C, C);
        } else {
          std::memset(out, 0, C);
        }
        continue;
      }
      // The kernel's weights: distances w, n to the west and north neighbours, e = 1 - w,
      // s = 1 - n, each corner's weight the product of the two far distances.
      const float fx = std::floor(ix), fy = std::floor(iy);
      const float dw = ix - fx, dn = iy - fy, de = 1.0f - dw, ds = 1.0f - dn;
      const float nw = mul_rn(ds, de), ne = mul_rn(ds, dw), sw = mul_rn(dn, de), se = mul_rn(dn, dw);
      const int x0 = static_cast<int>(std::min(std::max(fx, -2.0f), static_cast<float>(w)));
      const int y0 = static_cast<int>(std::min(std::max(fy, -2.0f), static_cast<float>(h)));
      const uint8_t* p = padded.data() + (y0 + kBorder) * padded_row + static_cast<int64_t>(x0 + kBorder) * C;
      for (int c = 0; c < C; ++c) {
        // ((nw + ne) + sw) + se, fused; outside corners' values 0.
        float v = mul_rn(kByteFloat[p[c]], nw);
        v = std::fma(kByteFloat[p[C + c]], ne, v);
        v = std::fma(kByteFloat[p[padded_row + c]], sw, v);
        v = std::fma(kByteFloat[p[padded_row + C + c]], se, v);
        out[c] = static_cast<uint8_t>(static_cast<int>(std::min(std::max(std::nearbyint(v), 0.0f), 255.0f)));
      }
    }
  }
}

#if defined(__x86_64__)
#define FASTLOAD_AVX2_INLINE inline __attribute__((always_inline, target("avx2,fma")))

// A rounded product (g++ lambdas do not inherit a target: these are functions).
FASTLOAD_AVX2_INLINE __m256 mul8(__m256 a, __m256 b) { return host_opaque(_mm256_mul_ps(a, b)); }

// The bytes at words + offset + shift (8 lanes) as floats.
FASTLOAD_AVX2_INLINE __m256 gather_bytes(const int* words, __m256i offset, int shift) {
  const __m256i word = _mm256_i32gather_epi32(words, _mm256_add_epi32(offset, _mm256_set1_epi32(shift)), 1);
  return _mm256_cvtepi32_ps(_mm256_and_si256(word, _mm256_set1_epi32(0xFF)));
}

// The bilinear sampling eight pixels a step on AVX2 + FMA: the same operations as
// tensor_affine_body lane by lane (explicit multiplies, adds and fused multiply-adds,
// every product kept apart from the add after it), the corners gathered from the
// zero-bordered copy.
__attribute__((target("avx2,fma"))) void tensor_affine_avx2(const uint8_t* src, uint8_t* dst, int h, int w, int C,
                                                            const double* m) {
  const float half_w = 0.5f * static_cast<float>(w), half_h = 0.5f * static_cast<float>(h);
  const float r00 = static_cast<float>(m[0]) / half_w, r10 = static_cast<float>(m[1]) / half_w;
  const float r20 = static_cast<float>(m[2]) / half_w;
  const float r01 = static_cast<float>(m[3]) / half_h, r11 = static_cast<float>(m[4]) / half_h;
  const float r21 = static_cast<float>(m[5]) / half_h;
  constexpr int kBorder = 2;
  const int padded_row = (w + 2 * kBorder) * C, row = w * C;
  thread_local std::vector<uint8_t> padded;
  padded.assign(static_cast<size_t>(h + 2 * kBorder) * padded_row + 4, 0);  // + 4: the last gather's word
  for (int y = 0; y < h; ++y)
    std::memcpy(padded.data() + static_cast<int64_t>(y + kBorder) * padded_row + kBorder * C, src + y * row, row);
  const __m256 one = _mm256_set1_ps(1.0f), low = _mm256_set1_ps(-2.0f), zero = _mm256_setzero_ps();
  const __m256 top = _mm256_set1_ps(255.0f), half = _mm256_set1_ps(-0.5f);
  const __m256 scale_w = _mm256_set1_ps(static_cast<float>(w) / 2.0f), scale_h = _mm256_set1_ps(static_cast<float>(h) / 2.0f);
  const __m256 max_x = _mm256_set1_ps(static_cast<float>(w)), max_y = _mm256_set1_ps(static_cast<float>(h));
  const __m256 lanes = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i pixel = _mm256_set1_epi32(C), line = _mm256_set1_epi32(padded_row);
  const __m256i origin = _mm256_set1_epi32(kBorder * padded_row + kBorder * C);
  alignas(32) int32_t values[8];
  for (int y = 0; y < h; ++y) {
    const __m256 by = _mm256_set1_ps(static_cast<float>(y) + 0.5f - half_h);
    for (int x = 0; x < w; x += 8) {
      const int count = std::min(8, w - x);
      const __m256 bx = _mm256_add_ps(_mm256_set1_ps(static_cast<float>(x) + 0.5f - half_w), lanes);
      const __m256 gx = _mm256_add_ps(_mm256_add_ps(mul8(bx, _mm256_set1_ps(r00)), mul8(by, _mm256_set1_ps(r10))),
                                      _mm256_set1_ps(r20));
      const __m256 gy = _mm256_add_ps(_mm256_add_ps(mul8(bx, _mm256_set1_ps(r01)), mul8(by, _mm256_set1_ps(r11))),
                                      _mm256_set1_ps(r21));
      const __m256 ix = _mm256_fmadd_ps(_mm256_add_ps(gx, one), scale_w, half);
      const __m256 iy = _mm256_fmadd_ps(_mm256_add_ps(gy, one), scale_h, half);
      const __m256 fx = _mm256_floor_ps(ix), fy = _mm256_floor_ps(iy);
      const __m256 dw = _mm256_sub_ps(ix, fx), dn = _mm256_sub_ps(iy, fy);
      const __m256 de = _mm256_sub_ps(one, dw), ds = _mm256_sub_ps(one, dn);
      const __m256 nw = mul8(ds, de), ne = mul8(ds, dw), sw = mul8(dn, de), se = mul8(dn, dw);
      const __m256i x0 = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(fx, low), max_x));
      const __m256i y0 = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(fy, low), max_y));
      const __m256i at = _mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(y0, line), _mm256_mullo_epi32(x0, pixel)),
                                          origin);
      const int* words = reinterpret_cast<const int*>(padded.data());
      uint8_t* out = dst + static_cast<int64_t>(y) * row + static_cast<int64_t>(x) * C;
      for (int c = 0; c < C; ++c) {
        const __m256i offset = _mm256_add_epi32(at, _mm256_set1_epi32(c));
        __m256 v = mul8(gather_bytes(words, offset, 0), nw);
        v = _mm256_fmadd_ps(gather_bytes(words, offset, C), ne, v);
        v = _mm256_fmadd_ps(gather_bytes(words, offset, padded_row), sw, v);
        v = _mm256_fmadd_ps(gather_bytes(words, offset, padded_row + C), se, v);
        v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_min_ps(_mm256_max_ps(v, zero), top);
        _mm256_store_si256(reinterpret_cast<__m256i*>(values), _mm256_cvttps_epi32(v));
        for (int k = 0; k < count; ++k) out[k * C + c] = static_cast<uint8_t>(values[k]);
      }
    }
  }
}

// With the FMA unit the fused steps are single instructions; without it std::fma is
// libm's (exact, slower).
__attribute__((target("avx2,fma"))) void tensor_affine_fma(const uint8_t* src, uint8_t* dst, int h, int w, int C,
                                                           const double* m, bool bilinear) {
  if (bilinear) return tensor_affine_avx2(src, dst, h, w, C, m);
  tensor_affine_body(src, dst, h, w, C, m, bilinear);
}
#endif

void tensor_affine(const uint8_t* src, uint8_t* dst, int h, int w, int C, int op, double magnitude, bool bilinear) {
  double m[6];
  tensor_affine_matrix(op, magnitude, w, h, m);
#if defined(__x86_64__)
  static const bool has_fma = __builtin_cpu_supports("fma");
  if (has_fma) return tensor_affine_fma(src, dst, h, w, C, m, bilinear);
#endif
  tensor_affine_body(src, dst, h, w, C, m, bilinear);
}

void tensor_greys(const uint8_t* px, int64_t pixels, int C, uint8_t* grey) {
  for (int64_t i = 0; i < pixels; ++i)
    grey[i] = C == 3 ? am::tensor_grey(px[3 * i], px[3 * i + 1], px[3 * i + 2]) : px[i];
}

// _blurred_degenerate_image: conv2d with (1 1 1; 1 5 1; 1 1 1) / 13 in float32, rounded,
// inside a one-pixel border of the original values. The exact sums are multiples of 1/13,
// never within float error of a .5 tie, so every summation order (torch's conv2d has its
// own) rounds the same, and v + 0.5 truncated is that rounding. Four values a step.
void tensor_smooth(const uint8_t* px, int h, int w, int C, uint8_t* out) {
  const float e = 1.0f / 13.0f, m = 5.0f / 13.0f;
  const Float4 edge = {e, e, e, e}, centre = {m, m, m, m}, half = {0.5f, 0.5f, 0.5f, 0.5f};
  const int64_t row = static_cast<int64_t>(w) * C, n = static_cast<int64_t>(h) * row;
  std::memcpy(out, px, static_cast<size_t>(n));
  thread_local std::vector<float> values;  // the image as floats, once
  values.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = kByteFloat[px[i]];
  for (int y = 1; y < h - 1; ++y) {
    const float* above = values.data() + (y - 1) * row;
    const float* line = values.data() + y * row;
    const float* below = values.data() + (y + 1) * row;
    uint8_t* dst = out + y * row;
    int64_t i = C;
    for (; i + 4 <= row - C; i += 4) {
      Float4 v = mul4(at4(above + i - C), edge) + mul4(at4(above + i), edge) + mul4(at4(above + i + C), edge);
      v += mul4(at4(line + i - C), edge) + mul4(at4(line + i), centre) + mul4(at4(line + i + C), edge);
      v += mul4(at4(below + i - C), edge) + mul4(at4(below + i), edge) + mul4(at4(below + i + C), edge);
      const Int4 t = __builtin_convertvector(v + half, Int4);
      for (int k = 0; k < 4; ++k) dst[i + k] = static_cast<uint8_t>(t[k]);
    }
    for (; i < row - C; ++i) {
      float v = 0.0f;
      for (const float* r : {above, line, below})
        for (int dx = -1; dx <= 1; ++dx) v += color::mul_rn(r[i + dx * C], r == line && dx == 0 ? m : e);
      dst[i] = static_cast<uint8_t>(static_cast<int>(v + 0.5f));
    }
  }
}

}  // namespace

void tensor_affine_matrix(int op, double magnitude, int width, int height, double* m) {
  // F.affine on a tensor: the centre relative to the image centre; F.rotate: -angle.
  switch (op) {
    case aa::kShearX:  // center=[0, 0]: the top-left corner, -(w / 2, h / 2) from the centre
      inverse_affine_matrix(-width * 0.5, -height * 0.5, 0, 0, 0, std::atan(magnitude) * kRadToDeg, 0, m);
      return;
    case aa::kShearY:
      inverse_affine_matrix(-width * 0.5, -height * 0.5, 0, 0, 0, 0, std::atan(magnitude) * kRadToDeg, m);
      return;
    case aa::kTranslateX:
      inverse_affine_matrix(0, 0, 0, std::trunc(magnitude), 0, 0, 0, m);
      return;
    case aa::kTranslateY:
      inverse_affine_matrix(0, 0, 0, 0, std::trunc(magnitude), 0, 0, m);
      return;
    case aa::kRotate:
      inverse_affine_matrix(0, 0, -magnitude, 0, 0, 0, 0, m);
      return;
    default: {
      const double identity[6] = {1, 0, 0, 0, 1, 0};
      std::memcpy(m, identity, sizeof identity);
    }
  }
}

void augmix_step(uint8_t* px, int h, int w, int C, int op, double magnitude, bool bilinear) {
  const int64_t pixels = static_cast<int64_t>(h) * w, n = pixels * C;
  const float ratio = static_cast<float>(1.0 + magnitude), rest = static_cast<float>(1.0 - (1.0 + magnitude));
  thread_local std::vector<uint8_t> scratch;
  if (aa::op_is_affine(op)) {
    scratch.assign(px, px + n);
    tensor_affine(scratch.data(), px, h, w, C, op, magnitude, bilinear);
    return;
  }
  switch (op) {
    case aa::kBrightness:
      tensor_blend_values(px, nullptr, 0.0f, n, ratio, rest);
      return;
    case aa::kColor:
      if (C != 3) return;  // adjust_saturation of one channel: the image
      scratch.resize(static_cast<size_t>(n));  // each pixel's grey, once per channel
      for (int64_t i = 0; i < pixels; ++i)
        scratch[3 * i] = scratch[3 * i + 1] = scratch[3 * i + 2] = am::tensor_grey(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
      tensor_blend_values(px, scratch.data(), 0.0f, n, ratio, rest);
      return;
    case aa::kContrast: {
      scratch.resize(static_cast<size_t>(pixels));
      tensor_greys(px, pixels, C, scratch.data());
      // torch.mean in float32: the sum of integers stays exact below 2^24, then one division.
      double sum = 0;
      for (int64_t i = 0; i < pixels; ++i) sum += scratch[i];
      const float mean = static_cast<float>(sum) / static_cast<float>(pixels);
      tensor_blend_values(px, nullptr, mean, n, ratio, rest);
      return;
    }
    case aa::kSharpness:
      if (h <= 2 || w <= 2) return;
      scratch.resize(static_cast<size_t>(n));
      tensor_smooth(px, h, w, C, scratch.data());
      tensor_blend_values(px, scratch.data(), 0.0f, n, ratio, rest);
      return;
    case aa::kAutoContrast: {
      uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
      for (int64_t i = 0; i < n; i += C) {
        for (int c = 0; c < C; ++c) {
          lo[c] = std::min(lo[c], px[i + c]);
          hi[c] = std::max(hi[c], px[i + c]);
        }
      }
      for (int c = 0; c < C; ++c) {
        if (lo[c] == hi[c]) continue;  // scale inf: torchvision keeps the channel
        // bound / (max - min) is torch's __rtruediv__: the reciprocal, times 255.
        const float minimum = lo[c], scale = color::mul_rn(1.0f / static_cast<float>(hi[c] - lo[c]), 255.0f);
        for (int64_t i = c; i < n; i += C) {
          float v = color::mul_rn(static_cast<float>(px[i]) - minimum, scale);
          px[i] = static_cast<uint8_t>(v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v));
        }
      }
      return;
    }
    case aa::kPosterize:
    case aa::kSolarize:
    case aa::kEqualize:
    case aa::kInvert: {  // integer ops: the tensor path's values are Pillow's
      const uint8_t fill[3] = {0, 0, 0};
      auto_augment_step(px, h, w, C, op, magnitude, fill, false);
      return;
    }
    default:
      return;
  }
}

void augmix_uint8(const am::AugMixRecord& r, uint8_t* px, int h, int w, int C) {
  if (!r.on()) return;
  const int64_t n = static_cast<int64_t>(h) * w * C;
  thread_local std::vector<float> mix;
  thread_local std::vector<uint8_t> chain;
  mix.resize(static_cast<size_t>(n));
  FASTLOAD_VALUES(mix, mix.data(), px, n, r.original_weight, true);
  for (int k = 0; k < r.width && k < am::kMaxChains; ++k) {
    chain.assign(px, px + n);
    for (int s = 0; s < r.depth[k] && s < am::kMaxDepth; ++s)
      augmix_step(chain.data(), h, w, C, r.steps[k][s].op, r.steps[k][s].magnitude, r.bilinear != 0);
    FASTLOAD_VALUES(mix, mix.data(), chain.data(), n, r.chain_weight[k], false);
  }
  FASTLOAD_VALUES(truncate, mix.data(), px, n);
}

namespace {

constexpr const char* kStepOp = "augmix_step";
constexpr const char* kParamsOp = "augmix_params";

// One AugMix op (torchvision's tensor path) with its magnitude on a uint8 HWC image.
at::Tensor augmix_step_op(const at::Tensor& image, int64_t op, double magnitude, bool bilinear) {
  check_augment_image(kStepOp, image);
  const int64_t H = image.size(0), W = image.size(1), C = image.size(2);
  check_op_ids(kStepOp, {op});
  FASTLOAD_CHECK_VALUE(aa::magnitude_valid(magnitude), kStepOp, "expected a finite magnitude within +-",
                       aa::kMaxMagnitude, ", got ", magnitude, ".");
  FASTLOAD_CHECK_VALUE(op != aa::kPosterize || (magnitude >= 0 && magnitude < 9), kStepOp,
                       "bits must be between or equal to 0 and 8, got ", magnitude, " (Posterize).");
  at::Tensor out = image.contiguous().clone();
  augmix_step(out.data_ptr<uint8_t>(), static_cast<int>(H), static_cast<int>(W), static_cast<int>(C),
              static_cast<int>(op), magnitude, bilinear);
  return out;
}

// The draws of samples `indices`: (weights float32 [N, 1 + width]: m0 then each chain's;
// depths int64 [N, width]; ops int64 [N, width, kMaxDepth] (-1 past the depth);
// magnitudes float64 [N, width, kMaxDepth]).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> augmix_params_op(
    const at::Tensor& indices, int64_t seed, int64_t epoch, at::IntArrayRef space_ops, at::ArrayRef<double> magnitudes,
    int64_t severity, int64_t width, int64_t chain_depth, double alpha) {
  const int64_t bins = check_augment_space(kParamsOp, indices, space_ops, magnitudes);
  FASTLOAD_CHECK_VALUE(severity >= 1 && severity <= bins, kParamsOp, "expected severity in [1, ", bins, "], got ",
                       severity, ".");
  FASTLOAD_CHECK_VALUE(width >= 1 && width <= am::kMaxChains && chain_depth <= am::kMaxDepth, kParamsOp,
                       "expected mixture_width in [1, ", am::kMaxChains, "] and chain_depth at most ", am::kMaxDepth,
                       ", got ", width, " and ", chain_depth, ".");
  FASTLOAD_CHECK_VALUE(std::isfinite(alpha) && alpha > 0, kParamsOp, "expected alpha > 0, got ", alpha, ".");
  std::vector<int32_t> ops32(space_ops.begin(), space_ops.end());
  const am::AugMixSpace space{ops32.data(), magnitudes.data(), static_cast<int>(ops32.size()), static_cast<int>(bins),
                              static_cast<int>(severity), static_cast<int>(width), static_cast<int>(chain_depth),
                              alpha, false};
  const at::Tensor idx = indices.contiguous();
  const int64_t N = idx.size(0), D = am::kMaxDepth;
  at::Tensor weights = at::empty({N, 1 + width}, idx.options().dtype(at::kFloat));
  at::Tensor depths = at::empty({N, width}, idx.options());
  at::Tensor ops = at::full({N, width, D}, -1, idx.options());
  at::Tensor mags = at::zeros({N, width, D}, idx.options().dtype(at::kDouble));
  for (int64_t i = 0; i < N; ++i) {
    const am::AugMixRecord r = am::augmix_draw(space, seed, epoch, idx.data_ptr<int64_t>()[i]);
    weights.data_ptr<float>()[i * (1 + width)] = r.original_weight;
    for (int64_t k = 0; k < width; ++k) {
      weights.data_ptr<float>()[i * (1 + width) + 1 + k] = r.chain_weight[k];
      depths.data_ptr<int64_t>()[i * width + k] = r.depth[k];
      for (int64_t s = 0; s < r.depth[k]; ++s) {
        ops.data_ptr<int64_t>()[(i * width + k) * D + s] = r.steps[k][s].op;
        mags.data_ptr<double>()[(i * width + k) * D + s] = r.steps[k][s].magnitude;
      }
    }
  }
  return {weights, depths, ops, mags};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) {
  m.impl("augmix_step", &augmix_step_op);
  m.impl("augmix_params", &augmix_params_op);
}

}  // namespace fastload
