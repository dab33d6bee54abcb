// The float resample's row loops, compiled once per instruction set:
// resample_float_cpu.cpp includes this file for the baseline build,
// resample_float_cpu_avx2.cpp for AVX2 + FMA (FASTLOAD_ISA_AVX2 = 0 or 1, before the
// include; simd_cpu.h says why the pragma and not -mavx2). resample_float_cpu.h has the
// design; README.md the figures. Two details that cost 2-3x when missed: the build's
// -fwrapv (Python's flags) stops g++ from vectorising `a[4 * x]`, so strided loops step
// pointers; and SSE2 has no 8-float registers, where g++ lowers an 8-float shuffle
// through scalars.
// No include guard: one inclusion per translation unit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "augment/simd_cpu.h"
#include "augment/color.h"
#include "augment/color_pass.h"
#include "augment/color_stage_cpu.h"
#include "augment/crop_resize_flip_normalize.h"
#include "augment/resample_float_cpu.h"

#if !defined(FASTLOAD_ISA_AVX2)
#error "define FASTLOAD_ISA_AVX2 (0 or 1) before including resample_float_cpu_impl.h"
#endif

#if FASTLOAD_ISA_AVX2
FASTLOAD_AVX2_BEGIN
namespace fastload::augment::avx2 {
#else
namespace fastload::augment::baseline {
#endif
namespace {

constexpr bool kWide = FASTLOAD_ISA_AVX2;

// dst[i] = src[i] as float, i < n.
FASTLOAD_INLINE void convert_row(const uint8_t* __restrict src, int n, float* __restrict dst) {
  for (int i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// row[i] (+)= sum_k w[k] * src[k][i], i < n: contiguous, vectorised.
FASTLOAD_INLINE void vertical_pass(const float* const* src, const float* w, int count, int n,
                                   bool accumulate, float* __restrict row) {
  int k = 0;
  if (accumulate) {
  } else if (count >= 2) {  // two taps per sweep halves the loads and stores of `row`
    const float* __restrict a = src[0];
    const float* __restrict b = src[1];
    const float wa = w[0], wb = w[1];
    for (int i = 0; i < n; ++i) row[i] = wa * a[i] + wb * b[i];
    k = 2;
  } else {
    const float* __restrict a = src[0];
    const float wa = w[0];
    for (int i = 0; i < n; ++i) row[i] = wa * a[i];
    k = 1;
  }
  for (; k + 1 < count; k += 2) {
    const float* __restrict a = src[k];
    const float* __restrict b = src[k + 1];
    const float wa = w[k], wb = w[k + 1];
    for (int i = 0; i < n; ++i) row[i] += wa * a[i] + wb * b[i];
  }
  if (k < count) {
    const float* __restrict a = src[k];
    const float wa = w[k];
    for (int i = 0; i < n; ++i) row[i] += wa * a[i];
  }
}


// RGB: hrow[4x + c] = sum_k wx[x, k] * row[(first_x[x] + k) * 3 + c], two columns at a
// time; TAPS > 0 fixes the tap count at compile time (unrolled), 0 reads it from the plan.
// WIDE: one 8-float vector for both columns (AVX); otherwise two 4-float vectors (SSE2
// has no 8-float registers, and g++ lowers the 8-float shuffle through scalars there).
template <int TAPS, bool WIDE>
FASTLOAD_INLINE void horizontal_rgb(const RowPlan& p, float* __restrict out) {
  const int K = TAPS > 0 ? TAPS : p.taps_x;
  const float* __restrict row = p.row;
  for (int x = 0; x < p.out_w; x += 2) {
    // An odd last column pairs with column 0's taps and zero weights; lanes 4-7 land in
    // the spare RGBx slot at the end of hrow.
    const float* s0 = row + 3 * p.first_x[x];
    const float* s1 = row + 3 * p.first_x[x + 1 < p.out_w ? x + 1 : 0];
    const float* w = p.wx + static_cast<size_t>(x / 2) * K * 8;
#if defined(FASTLOAD_SHUFFLEVECTOR)
    if (WIDE) {
      Float8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int k = 0; k < K; ++k) {
        // RGB of tap k (+ R of the next pixel in the spare lane) for both columns.
        const Float8 v = __builtin_shufflevector(load4(s0 + 3 * k), load4(s1 + 3 * k), 0, 1, 2, 3, 4, 5, 6, 7);
        Float8 weights;
        load8(weights, w + 8 * k);
        acc += weights * v;
      }
      std::memcpy(out + 4 * x, &acc, sizeof(acc));
      continue;
    }
#endif
#if defined(FASTLOAD_VECTOR_EXT)
    Float4 acc0 = {0, 0, 0, 0}, acc1 = {0, 0, 0, 0};
    for (int k = 0; k < K; ++k) {
      acc0 += load4(w + 8 * k) * load4(s0 + 3 * k);
      acc1 += load4(w + 8 * k + 4) * load4(s1 + 3 * k);
    }
    std::memcpy(out + 4 * x, &acc0, sizeof(acc0));
    std::memcpy(out + 4 * x + 4, &acc1, sizeof(acc1));
#else
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < K; ++k)
      for (int lane = 0; lane < 4; ++lane) {
        acc[lane] += w[8 * k + lane] * s0[3 * k + lane];
        acc[4 + lane] += w[8 * k + 4 + lane] * s1[3 * k + lane];
      }
    std::memcpy(out + 4 * x, acc, sizeof(acc));
#endif
  }
}

// Gray: hrow[x] = sum_k wx[x, k] * row[first_x[x] + k].
template <int TAPS>
FASTLOAD_INLINE void horizontal_gray(const RowPlan& p, float* __restrict out) {
  const int K = TAPS > 0 ? TAPS : p.taps_x;
  const float* __restrict row = p.row;
  for (int x = 0; x < p.out_w; ++x) {
    const float* src = row + p.first_x[x];
    const float* w = p.wx + static_cast<size_t>(x) * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += w[k] * src[k];
    out[x] = acc;
  }
}

// Tap counts up to 8 cover bilinear downscaling by up to ~3.5x per axis (bicubic: ~1.7x):
// unrolled. Writes `out` (p.hrow, or p.hscratch when clipped).
template <bool WIDE>
FASTLOAD_INLINE void horizontal_pass_unrolled(const RowPlan& p, float* out) {
  if (p.channels == 3) {
    switch (p.taps_x) {
      case 1: return horizontal_rgb<1, WIDE>(p, out);
      case 2: return horizontal_rgb<2, WIDE>(p, out);
      case 3: return horizontal_rgb<3, WIDE>(p, out);
      case 4: return horizontal_rgb<4, WIDE>(p, out);
      case 5: return horizontal_rgb<5, WIDE>(p, out);
      case 6: return horizontal_rgb<6, WIDE>(p, out);
      case 7: return horizontal_rgb<7, WIDE>(p, out);
      case 8: return horizontal_rgb<8, WIDE>(p, out);
      default: return horizontal_rgb<0, WIDE>(p, out);
    }
  }
  switch (p.taps_x) {
    case 2: return horizontal_gray<2>(p, out);
    case 3: return horizontal_gray<3>(p, out);
    case 4: return horizontal_gray<4>(p, out);
    default: return horizontal_gray<0>(p, out);
  }
}

// Out of line: inlined, its thirteen unrolled loops were compiled again for every output
// dtype and row sink (minutes of build time), to save one call per row.
__attribute__((noinline)) void horizontal_pass(const RowPlan& p, float* out) {
  horizontal_pass_unrolled<kWide>(p, out);
}

// out[c, y, x] = cast(v[c, x] * alpha[c] + beta[c]) through the strides, v from hrow
// (RGBx or gray). CAST: Cast<T>::apply, or to_uint8_bounded when the plan allows.
template <typename S, typename CastFn>
FASTLOAD_INLINE void store_row(const RowPlan& p, S* dst, int64_t stride_c, int64_t stride_x, CastFn cast) {
  const int OW = p.out_w;
  const float* __restrict v = p.hrow;
  if (p.channels == 3) {
    const float a0 = p.alpha[0], a1 = p.alpha[1], a2 = p.alpha[2];
    const float b0 = p.beta[0], b1 = p.beta[1], b2 = p.beta[2];
    if (stride_x == 1) {  // NCHW: three contiguous runs
      S* __restrict d0 = dst;
      S* __restrict d1 = dst + stride_c;
      S* __restrict d2 = dst + 2 * stride_c;
      // Pointer steps, not v[4 * x]: the build's -fwrapv (Python's flags) makes int
      // index arithmetic wrap, which stops g++ from vectorising strided accesses.
      const float* __restrict vp = v;
      for (int x = 0; x < OW; ++x, vp += 4) {
        d0[x] = cast(vp[0] * a0 + b0);
        d1[x] = cast(vp[1] * a1 + b1);
        d2[x] = cast(vp[2] * a2 + b2);
      }
      return;
    }
    if (stride_c == 1 && stride_x == 3) {  // channels_last: RGBx -> RGB
      S* __restrict d = dst;
      const float* __restrict vp = v;
      for (int x = 0; x < OW; ++x, vp += 4, d += 3) {
        d[0] = cast(vp[0] * a0 + b0);
        d[1] = cast(vp[1] * a1 + b1);
        d[2] = cast(vp[2] * a2 + b2);
      }
      return;
    }
    for (int c = 0; c < 3; ++c) {  // any other strides
      S* d = dst + c * stride_c;
      for (int x = 0; x < OW; ++x) d[x * stride_x] = cast(v[4 * x + c] * p.alpha[c] + p.beta[c]);
    }
    return;
  }
  const float a = p.alpha[0], b = p.beta[0];
  if (stride_x == 1) {
    S* __restrict d = dst;
    for (int x = 0; x < OW; ++x) d[x] = cast(v[x] * a + b);
  } else {
    for (int x = 0; x < OW; ++x) dst[x * stride_x] = cast(v[x] * a + b);
  }
}

// Each output row, once resampled into hrow, goes to sink(y): the store, or the colour
// pass's first step.
template <typename Sink>
FASTLOAD_INLINE void run_rows(const RowPlan& p, const ImageView& in, Sink sink) {
  const int C = p.channels;
  const int n = p.span * C;
  const uint8_t* base = in.data + static_cast<int64_t>(p.col0) * C;
  for (int y = 0; y < p.out_h; ++y) {
    const int first = p.rows_y[2 * y], count = p.rows_y[2 * y + 1];
    if (count > 0) {
      // In chunks of kTapChunk rows (one chunk but for strong downscaling).
      const float* wy = p.wy + static_cast<size_t>(y) * p.taps_y;
      for (int k0 = 0; k0 < count; k0 += kTapChunk) {
        const int chunk = std::min(kTapChunk, count - k0);
        const float* src[kTapChunk];
        for (int k = 0; k < chunk; ++k) {
          const int r = first + k0 + k, slot = r % p.ring_rows;
          float* converted = p.ring + slot * p.ring_stride;
          if (p.ring_row[slot] != r) {
            convert_row(base + r * in.row_stride, n, converted);
            p.ring_row[slot] = r;
          }
          src[k] = converted;
        }
        vertical_pass(src, wy + k0, chunk, n, k0 > 0, p.row);
      }
      horizontal_pass(p, p.hrow);
    } else {  // padding row: v = 0 everywhere
      std::fill(p.hrow, p.hrow + static_cast<size_t>(p.out_w) * 4, 0.0f);
    }
    sink(y);
  }
}

// dst[i] = src[i] clipped and rounded half up, Pillow's uint8 intermediate (dst may be src).
FASTLOAD_INLINE void round_row(const float* src, int n, float* dst) {
  for (int i = 0; i < n; ++i) dst[i] = static_cast<float>(color::resampled_to_uint8(src[i]));
}

// dst[i] = clip_pixel(src[i]), i < n (dst may be src).
FASTLOAD_INLINE void clip_row(const float* src, int n, float* dst) {
  for (int i = 0; i < n; ++i) dst[i] = clip_pixel(src[i]);
}

// Bicubic: Pillow's order, horizontal pass first, each pass clipped to [0, 255] (its
// uint8 intermediate saturates; here it stays float). Every source row an output row
// needs is converted, resampled horizontally and clipped once, into the ring; the
// vertical pass then sums ring rows into hrow.
template <typename Sink>
FASTLOAD_INLINE void run_rows_clipped(const RowPlan& p, const ImageView& in, Sink sink) {
  const int C = p.channels;
  const int n = p.span * C;
  const int nh = C == 3 ? 4 * p.out_w : p.out_w;
  const uint8_t* base = in.data + static_cast<int64_t>(p.col0) * C;
  for (int y = 0; y < p.out_h; ++y) {
    const int first = p.rows_y[2 * y], count = p.rows_y[2 * y + 1];
    if (count > 0) {
      const float* wy = p.wy + static_cast<size_t>(y) * p.taps_y;
      for (int k0 = 0; k0 < count; k0 += kTapChunk) {
        const int chunk = std::min(kTapChunk, count - k0);
        const float* src[kTapChunk];
        for (int k = 0; k < chunk; ++k) {
          const int r = first + k0 + k, slot = r % p.ring_rows;
          float* resampled = p.ring + slot * p.ring_stride;
          if (p.ring_row[slot] != r) {
            convert_row(base + r * in.row_stride, n, p.row);
            horizontal_pass(p, p.hscratch);
            if (p.round_intermediate) {
              round_row(p.hscratch, nh, resampled);
            } else {
              clip_row(p.hscratch, nh, resampled);
            }
            p.ring_row[slot] = r;
          }
          src[k] = resampled;
        }
        vertical_pass(src, wy + k0, chunk, nh, k0 > 0, p.hrow);
      }
      clip_row(p.hrow, nh, p.hrow);
    } else {  // padding row: v = 0 everywhere
      std::fill(p.hrow, p.hrow + static_cast<size_t>(p.out_w) * 4, 0.0f);
    }
    sink(y);
  }
}

template <typename Sink>
FASTLOAD_INLINE void run_any_rows(const RowPlan& p, const ImageView& in, Sink sink) {
  if (p.clipped) return run_rows_clipped(p, in, sink);
  run_rows(p, in, sink);
}

// The colour steps' first pass, whatever the output dtype: Pillow's resampled rows
// (plan.pixels_ready) or the float resample's rounded to uint8, through the first colour
// steps (color_stage_cpu_impl.h), the luma summed.
__attribute__((noinline)) void color_first_pass(RowPlan& p, const ImageView& in) {
  color_rows_init(p.color_rows, *p.color);
  p.luma_sum = 0;
  if (p.pixels_ready) {
    for (int y = 0; y < p.out_h; ++y) color_first_pixels(p, y);
  } else {
    run_any_rows(p, in, [&](int y) FASTLOAD_INLINE_LAMBDA { color_first_row(p, y); });
  }
}

// The second pass: contrast and the steps after it, back to hrow (color_second_row), the
// value map and store; then the erased rectangle over the stored values.
template <typename S, typename CastFn>
FASTLOAD_INLINE void color_finish(RowPlan& p, const OutputView& out, CastFn cast) {
  const color::ColorPass& cp = *p.color;
  const int C = p.channels, OW = p.out_w;
  const int split = cp.split();
  if (cp.quantized() && split < 4)
    color_rows_contrast(p.color_rows, cp, color::pil_contrast_mean(p.luma_sum, static_cast<int64_t>(p.out_h) * OW));
  S* base = static_cast<S*>(out.data);
  for (int y = 0; y < p.out_h; ++y) {
    if (cp.quantized()) {
      color_second_row(p, y);
      store_row(p, base + y * out.stride_y, out.stride_c, out.stride_x, cast);
    }
    if (cp.erases() && y >= cp.erase.top && y < cp.erase.top + cp.erase.height) {
      for (int c = 0; c < C; ++c) {
        S* d = base + y * out.stride_y + c * out.stride_c;
        for (int x = cp.erase.left; x < cp.erase.left + cp.erase.width; ++x)
          d[x * out.stride_x] = cast(color::erase_value_at(cp, c, y, x));
      }
    }
  }
}

template <typename S, typename CastFn>
FASTLOAD_INLINE void run_cast(RowPlan& p, const ImageView& in, const OutputView& out, CastFn cast) {
  S* base = static_cast<S*>(out.data);
  auto store = [&](int y) FASTLOAD_INLINE_LAMBDA {
    store_row(p, base + y * out.stride_y, out.stride_c, out.stride_x, cast);
  };
  const bool colour = p.color != nullptr && p.color->any();
  const bool quantized = colour && p.color->quantized();
  if (!quantized) {  // no colour steps, or erasing only: the float values are stored as usual
    run_any_rows(p, in, store);
    if (!colour) return;
  } else {
    color_first_pass(p, in);
  }
  // GaussianBlur and the AutoAugment ops, after every colour step: p.color becomes what is left to store.
  color::ColorPass rest;
  if (p.pixels_ready) p.color = whole_image_stage(*p.color, p.pixels, p.out_h, p.out_w, p.channels, p.luma_sum, rest);
  color_finish<S>(p, out, cast);
}

template <typename T>
FASTLOAD_INLINE void run_sample(RowPlan& p, const ImageView& in, const OutputView& out) {
  using S = typename Cast<T>::Storage;
  if constexpr (std::is_same_v<T, uint8_t>) {
    if (p.uint8_bounded)
      return run_cast<S>(p, in, out, [](float v) FASTLOAD_INLINE_LAMBDA { return to_uint8_bounded(v); });
  }
  run_cast<S>(p, in, out, [](float v) FASTLOAD_INLINE_LAMBDA { return Cast<T>::apply(v); });
}

}  // namespace

void resample_float(RowPlan& p, const ImageView& in, const OutputView& out) {
  switch (out.dtype) {
    case c10::ScalarType::Byte:
      return run_sample<uint8_t>(p, in, out);
    case c10::ScalarType::Float:
      return run_sample<float>(p, in, out);
    case c10::ScalarType::Half:
      return run_sample<c10::Half>(p, in, out);
    case c10::ScalarType::BFloat16:
      return run_sample<c10::BFloat16>(p, in, out);
    default:
      break;  // the ops validate the dtype; the engine only makes these four
  }
}

}  // namespace fastload::augment::{avx2,baseline}
#if FASTLOAD_ISA_AVX2
FASTLOAD_AVX2_END
#endif
