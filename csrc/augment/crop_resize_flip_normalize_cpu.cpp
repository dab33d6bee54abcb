// CPU kernel of the fused augment: crop -> antialiased resize (bilinear, bicubic or
// nearest) -> flips -> normalise -> cast -> strided store, one sample per call (see
// README.md).
//
// Separable, streamed one output row at a time, so the working set stays in L1:
//   1. tap tables for both axes, once per sample (crop_resize_flip_normalize.h);
//   2. per output row: vertical pass over the uint8 rows its taps need, only over the
//      columns the horizontal taps need, into a float row (interleaved channels);
//   3. horizontal pass from that row, flip already in the table. For RGB each output
//      pixel reads its taps as 4-float vectors (RGB + one spare lane) and two output
//      pixels share one 8-float multiply-add, so one instruction serves 2 x 3 channels;
//      the result is one RGBx row;
//   4. normalise + cast + store through the output strides (NCHW and channels_last
//      have their own loops, which g++ vectorises from the RGBx row).
// Vertical first puts the gather-like pass (3) on out_h rows instead of the crop's rows
// and lets padding rows skip all reads. Bicubic clips each pass to [0, 255] as Pillow
// does, after its horizontal pass, so it runs the passes the other way round
// (run_rows_clipped): each source row is resampled horizontally once, into a ring.
// The loops are plain C++ (GCC vector extensions for the 4/8-float vectors) compiled
// twice, for baseline x86-64 and for AVX2+FMA, picked at run time (README.md has the
// figures).
#include "augment/crop_resize_flip_normalize_cpu.h"
#include "augment/augmix_cpu.h"
#include "augment/autoaugment_cpu.h"
#include "augment/blur_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "augment/crop_resize_flip_normalize.h"
#include "augment/crop_resize_flip_normalize_checks.h"
#include "check.h"

#if defined(__GNUC__) && !defined(__INTEL_COMPILER)
#define FASTLOAD_VECTOR_EXT 1
#define FASTLOAD_INLINE __attribute__((always_inline)) inline
// On a lambda: g++ compiles a lambda it does not inline for the baseline ISA even inside
// an AVX2 function, so the per-row sinks and casts are always inlined.
#define FASTLOAD_INLINE_LAMBDA __attribute__((always_inline))
#else
#define FASTLOAD_INLINE inline
#define FASTLOAD_INLINE_LAMBDA
#endif
// g++ >= 12 and clang: the 8-float horizontal pass (assembling it through memory instead
// is 4x slower: store-forwarding stalls); older compilers take the 4-float one.
#if defined(FASTLOAD_VECTOR_EXT) && defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define FASTLOAD_SHUFFLEVECTOR 1
#endif
#endif
// The loops compiled for baseline x86-64 (SSE2) and again for AVX2+FMA, chosen at run
// time: the wheel must run on any x86-64, and -march=native is not an option.
#if defined(__x86_64__) && defined(FASTLOAD_VECTOR_EXT)
#define FASTLOAD_HAVE_AVX2_PATH 1
#define FASTLOAD_AVX2 __attribute__((target("avx2,fma")))
#endif

#include "augment/color_cpu_simd.h"  // after the FASTLOAD_INLINE / FASTLOAD_SHUFFLEVECTOR macros

namespace fastload {
namespace {

using augment::Axis;
#if defined(FASTLOAD_SHUFFLEVECTOR)
namespace simd = augment::color::simd;
#endif
using augment::Cast;
using augment::Taps;

// The vertical pass sums at most this many rows per sweep (one sweep but for strong
// downscaling); the ring of converted rows has at least this many slots.
constexpr int kTapChunk = 16;
// The ring's size cap, in floats (4 MB): reached only by strong downscaling of big images.
constexpr int64_t kRingFloats = int64_t{1} << 20;

// One sample's colour ops over its uint8 rows (the PIL stage). Brightness and contrast
// blend every value with one grey per sample, so a 256-entry table of Pillow's blend
// (color.h, the same function) stands in for the float math in the baseline build (the
// AVX2 build blends 16 values a step, faster than the lookups); contrast's is made once
// its mean is known, after the first pass.
struct ColorRows {
  uint8_t brightness[256];
  uint8_t contrast[256];
  int contrast_mean;
  uint8_t hue_shift;
};

// Per-sample plan: tap tables and buffers, all inside the caller's ResizeScratch.
struct Plan {
  int channels, out_h, out_w;
  int taps_x;  // taps per output column, padded with zero weights to the maximum
  int span;    // source columns the horizontal taps touch: [col0, col0 + span)
  int col0;
  const int* first_x;  // [out_w], relative to col0
  // RGB: [ceil(out_w / 2)][taps_x][8], the weight of column 2p in lanes 0-3 and of
  // column 2p+1 in lanes 4-7 (one 8-float load per tap). Gray: [out_w][taps_x].
  const float* wx;
  const int* rows_y;  // [out_h * 2]: first source row, tap count (0 = padding row)
  const float* wy;    // [out_h * taps_y]
  int taps_y;
  // Vertical result (clipped: the converted source row), interleaved:
  // [(span + taps_x) * C + 8], zero tail.
  float* row;
  // Source rows converted to float once each (clipped: resampled horizontally and
  // clipped, RGBx [out_w][4] or gray [out_w]): a ring of ring_rows rows of ring_stride
  // floats, ring_row[slot] = the source row held (-1: none). The rows an output row needs
  // are consecutive and move one way (backwards when flipped vertically), so taps_y slots
  // hold them all; strong downscaling caps the ring (rows then may be converted twice).
  float* ring;
  int* ring_row;
  int ring_rows;
  int64_t ring_stride;
  float* hrow;      // horizontal result (clipped: vertical result): RGBx [out_w + 1][4], or gray [out_w]
  float* hscratch;  // clipped only: one source row's horizontal result, as hrow
  bool clipped;     // bicubic: horizontal pass first, each pass clipped to [0, 255]
  bool round_intermediate;  // and the horizontal result rounded to uint8, as Pillow's (colour ops)
  float alpha[3], beta[3];
  bool uint8_bounded;  // every output value is below 2^31 in magnitude
  // Colour ops (color_pass.h), or null: the resampled rows are rounded into `pixels`
  // (uint8 HWC, out_h x out_w), with the first colour steps done and their luma summed.
  const augment::color::ColorPass* color;
  uint8_t* pixels;
  uint64_t luma_sum;
  bool pixels_ready;  // pixels already hold Pillow's resampled sample (the first colour steps still to run)
  ColorRows color_rows;
};

// The taps of every output index of an axis, in order. NEAREST walks Pillow's
// accumulated coordinate once (compute_taps would add up to i for each i).
void axis_taps(const Axis& axis, int n, std::vector<Taps>& taps) {
  taps.resize(static_cast<size_t>(n));
  if (axis.mode == Interpolation::kNearest) {
    double x = augment::nearest_origin(axis);
    for (int i = 0; i < n; ++i, x += axis.step) taps[i] = augment::nearest_taps(axis, x);
    return;
  }
  for (int i = 0; i < n; ++i) taps[i] = augment::compute_taps(axis, i);
}

void build_plan(const ImageView& in, const Box& box, const Resample& resample, float scale, const float* mean,
                const float* std, const OutputView& out, ResizeScratch& scratch, Plan& plan, bool pil_order) {
  const int C = in.channels, OH = out.height, OW = out.width;
  const bool flip = resample.flip;
  // Pillow's order (horizontal pass first, its uint8 intermediate) where a uint8 image
  // is the result (the colour ops' PIL stage), or where the filter must clip (bicubic).
  plan.clipped = augment::clips(resample.interpolation) || pil_order;
  plan.round_intermediate = pil_order;
  plan.channels = C;
  plan.out_h = OH;
  plan.out_w = OW;
  plan.uint8_bounded = true;
  for (int c = 0; c < C; ++c) {
    plan.alpha[c] = scale / std[c];
    plan.beta[c] = -mean[c] / std[c];
    // The resampled v lies in [0, 255], so |v * alpha + beta| <= 255 |alpha| + |beta|.
    plan.uint8_bounded &= 255.0f * std::fabs(plan.alpha[c]) + std::fabs(plan.beta[c]) < 1e9f;
  }

  // Columns. Flip mirrors the output, so output x takes the taps of column OW-1-x.
  const Axis ax = augment::make_axis(box.left, box.width, in.width, OW, resample.interpolation);
  auto& column_taps = scratch.column_taps;
  axis_taps(ax, OW, column_taps);
  int col0 = INT_MAX, col1 = 0, taps_x = 0;
  for (int x = 0; x < OW; ++x) {
    const Taps& t = column_taps[x];
    if (t.count > 0) {
      col0 = std::min(col0, t.first);
      col1 = std::max(col1, t.first + t.count);
      taps_x = std::max(taps_x, t.count);
    }
  }
  if (taps_x == 0) col0 = col1 = 0;  // every column is padding
  plan.taps_x = taps_x;
  plan.col0 = col0;
  plan.span = col1 - col0;
  auto& first_x = scratch.horizontal_first;
  first_x.resize(static_cast<size_t>(OW));
  auto& wx = scratch.horizontal_weights;
  const size_t pairs = (static_cast<size_t>(OW) + 1) / 2;
  wx.assign(C == 3 ? pairs * taps_x * 8 : static_cast<size_t>(OW) * taps_x, 0.0f);
  for (int x = 0; x < OW; ++x) {
    const Taps& t = column_taps[flip ? OW - 1 - x : x];
    for (int k = 0; k < t.count; ++k) {
      const float w = augment::tap_weight(ax, t.centre, t.first + k) * t.norm;
      if (C == 3) {
        float* lanes = &wx[(static_cast<size_t>(x / 2) * taps_x + k) * 8 + (x % 2) * 4];
        lanes[0] = lanes[1] = lanes[2] = lanes[3] = w;
      } else {
        wx[static_cast<size_t>(x) * taps_x + k] = w;
      }
    }
    // Padding columns keep all-zero weights and read from col0: their value is 0.
    first_x[x] = t.count > 0 ? t.first - col0 : 0;
  }
  plan.first_x = first_x.data();
  plan.wx = wx.data();

  // Rows. The vertical flip mirrors them as the horizontal one mirrors the columns.
  const Axis ay = augment::make_axis(box.top, box.height, in.height, OH, resample.interpolation);
  auto& row_taps = scratch.row_taps;
  axis_taps(ay, OH, row_taps);
  auto& rows_y = scratch.vertical_first;
  rows_y.resize(2 * static_cast<size_t>(OH));  // + the ring's tags, below
  int taps_y = 0;
  for (int y = 0; y < OH; ++y) taps_y = std::max(taps_y, row_taps[y].count);
  auto& wy = scratch.vertical_weights;
  wy.assign(static_cast<size_t>(OH) * std::max(taps_y, 1), 0.0f);
  for (int y = 0; y < OH; ++y) {
    const Taps& t = row_taps[resample.flip_v ? OH - 1 - y : y];
    rows_y[2 * y] = t.first;
    rows_y[2 * y + 1] = plan.span > 0 ? t.count : 0;
    for (int k = 0; k < t.count; ++k)
      wy[static_cast<size_t>(y) * taps_y + k] = augment::tap_weight(ay, t.centre, t.first + k) * t.norm;
  }
  // The ring holds converted source rows, or (clipped) horizontally resampled ones.
  const int64_t ring_floats = plan.clipped ? (C == 3 ? 4 * static_cast<int64_t>(OW) : OW)
                                           : static_cast<int64_t>(plan.span) * C;
  const int64_t ring_stride = (ring_floats + 15) / 16 * 16;  // 64-byte steps
  plan.ring_stride = ring_stride;
  plan.ring_rows = static_cast<int>(std::min<int64_t>(
      taps_y, std::max<int64_t>(kTapChunk, kRingFloats / std::max<int64_t>(ring_stride, 1))));
  rows_y.resize(2 * static_cast<size_t>(OH) + plan.ring_rows);
  std::fill(rows_y.begin() + 2 * static_cast<size_t>(OH), rows_y.end(), -1);
  plan.rows_y = rows_y.data();
  plan.ring_row = rows_y.data() + 2 * static_cast<size_t>(OH);
  plan.wy = wy.data();
  plan.taps_y = taps_y;

  // Buffers. The tail of `row` beyond span * C stays zero: zero-weight taps of the last
  // columns and the spare fourth lane read it, and 0 * garbage could be NaN.
  const size_t row_size = static_cast<size_t>(plan.span + taps_x) * C + 8;
  auto& buffer = scratch.intermediate;
  const size_t hrow_size = (static_cast<size_t>(OW) + 1) * 4;
  const size_t hscratch_size = plan.clipped ? hrow_size : 0;
  buffer.assign(row_size + hrow_size + hscratch_size, 0.0f);
  buffer.resize(row_size + hrow_size + hscratch_size + static_cast<size_t>(plan.ring_stride) * plan.ring_rows);
  plan.row = buffer.data();
  plan.hrow = buffer.data() + row_size;
  plan.hscratch = plan.clipped ? buffer.data() + row_size + hrow_size : nullptr;
  plan.ring = buffer.data() + row_size + hrow_size + hscratch_size;
}

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

#if defined(FASTLOAD_VECTOR_EXT)
typedef float Float4 __attribute__((vector_size(16)));
typedef float Float8 __attribute__((vector_size(32)));

// A vector of lanes from p (unaligned): the float and the fixed-point passes' loads.
template <typename V, typename T>
FASTLOAD_INLINE V load_lanes(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
FASTLOAD_INLINE Float4 load4(const float* p) { return load_lanes<Float4>(p); }
FASTLOAD_INLINE void load8(Float8& v, const float* p) { std::memcpy(&v, p, sizeof(v)); }
#endif

// RGB: hrow[4x + c] = sum_k wx[x, k] * row[(first_x[x] + k) * 3 + c], two columns at a
// time; TAPS > 0 fixes the tap count at compile time (unrolled), 0 reads it from the plan.
// WIDE: one 8-float vector for both columns (AVX); otherwise two 4-float vectors (SSE2
// has no 8-float registers, and g++ lowers the 8-float shuffle through scalars there).
template <int TAPS, bool WIDE>
FASTLOAD_INLINE void horizontal_rgb(const Plan& p, float* __restrict out) {
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
FASTLOAD_INLINE void horizontal_gray(const Plan& p, float* __restrict out) {
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
FASTLOAD_INLINE void horizontal_pass_unrolled(const Plan& p, float* out) {
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

// Out of line, once per instruction set: inlined, its thirteen unrolled loops were
// compiled again for every output dtype and row sink (minutes of build time), to save
// one call per row.
__attribute__((noinline)) void horizontal_pass_baseline(const Plan& p, float* out) {
  horizontal_pass_unrolled<false>(p, out);
}
#if defined(FASTLOAD_HAVE_AVX2_PATH)
__attribute__((noinline)) FASTLOAD_AVX2 void horizontal_pass_avx2(const Plan& p, float* out) {
  horizontal_pass_unrolled<true>(p, out);
}
#endif

template <bool WIDE>
FASTLOAD_INLINE void horizontal_pass(const Plan& p, float* out) {
#if defined(FASTLOAD_HAVE_AVX2_PATH)
  if constexpr (WIDE) return horizontal_pass_avx2(p, out);
#endif
  horizontal_pass_baseline(p, out);
}

// out[c, y, x] = cast(v[c, x] * alpha[c] + beta[c]) through the strides, v from hrow
// (RGBx or gray). CAST: Cast<T>::apply, or to_uint8_bounded when the plan allows.
template <typename S, typename CastFn>
FASTLOAD_INLINE void store_row(const Plan& p, S* dst, int64_t stride_c, int64_t stride_x, CastFn cast) {
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
template <bool WIDE, typename Sink>
FASTLOAD_INLINE void run_rows(const Plan& p, const ImageView& in, Sink sink) {
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
      horizontal_pass<WIDE>(p, p.hrow);
    } else {  // padding row: v = 0 everywhere
      std::fill(p.hrow, p.hrow + static_cast<size_t>(p.out_w) * 4, 0.0f);
    }
    sink(y);
  }
}

// dst[i] = src[i] clipped and rounded half up, Pillow's uint8 intermediate (dst may be src).
FASTLOAD_INLINE void round_row(const float* src, int n, float* dst) {
  for (int i = 0; i < n; ++i) dst[i] = static_cast<float>(augment::color::resampled_to_uint8(src[i]));
}

// dst[i] = clip_pixel(src[i]), i < n (dst may be src).
FASTLOAD_INLINE void clip_row(const float* src, int n, float* dst) {
  for (int i = 0; i < n; ++i) dst[i] = augment::clip_pixel(src[i]);
}

// Bicubic: Pillow's order, horizontal pass first, each pass clipped to [0, 255] (its
// uint8 intermediate saturates; here it stays float). Every source row an output row
// needs is converted, resampled horizontally and clipped once, into the ring; the
// vertical pass then sums ring rows into hrow.
template <bool WIDE, typename Sink>
FASTLOAD_INLINE void run_rows_clipped(const Plan& p, const ImageView& in, Sink sink) {
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
            horizontal_pass<WIDE>(p, p.hscratch);
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

template <bool WIDE, typename Sink>
FASTLOAD_INLINE void run_any_rows(const Plan& p, const ImageView& in, Sink sink) {
  if (p.clipped) return run_rows_clipped<WIDE>(p, in, sink);
  run_rows<WIDE>(p, in, sink);
}

void color_rows_init(ColorRows& t, const augment::color::ColorPass& cp) {
  namespace color = augment::color;
  const color::JitterParams& jp = cp.jitter_params;
  const bool jitter = cp.jitter;
  for (int v = 0; v < 256; ++v)
    t.brightness[v] = jitter && jp.enabled[color::kBrightness]
                          ? color::pil_blend(0, static_cast<uint8_t>(v), jp.factor[color::kBrightness])
                          : static_cast<uint8_t>(v);
  t.hue_shift = jitter && jp.enabled[color::kHue] ? color::pil_hue_shift(jp.factor[color::kHue]) : 0;
}

void color_rows_contrast(ColorRows& t, const augment::color::ColorPass& cp, int mean) {
  namespace color = augment::color;
  const float f = cp.jitter_params.factor[color::kContrast];
  for (int v = 0; v < 256; ++v)
    t.contrast[v] = color::pil_blend(static_cast<uint8_t>(mean), static_cast<uint8_t>(v), f);
  t.contrast_mean = mean;
}

// The jitter ops order[begin, end) over n pixels of one row, op after op (the row stays
// in L1), then the grayscale: what color_first / color_second do per pixel.
template <bool WIDE>
FASTLOAD_INLINE void color_ops_row(const augment::color::ColorPass& cp, const ColorRows& t, uint8_t* px, int n,
                                   int C, int begin, int end, bool grayscale) {
  namespace color = augment::color;
  const color::JitterParams& jp = cp.jitter_params;
  for (int k = begin; cp.jitter && k < end; ++k) {
    const int op = jp.order[k];
    if (op < 0 || op > 3 || !jp.enabled[op]) continue;
    if (op == color::kBrightness || op == color::kContrast) {
#if defined(FASTLOAD_SHUFFLEVECTOR)
      if constexpr (WIDE) {
        simd::pil_blend_row8(px, n * C, op == color::kBrightness ? 0 : t.contrast_mean, jp.factor[op]);
        continue;
      }
#endif
      const uint8_t* lut = op == color::kBrightness ? t.brightness : t.contrast;
      for (int i = 0; i < n * C; ++i) px[i] = lut[px[i]];
    } else if (C == 3 && op == color::kSaturation) {
      const float f = jp.factor[op];
#if defined(FASTLOAD_SHUFFLEVECTOR)
      if constexpr (WIDE) {
        simd::pil_saturation_row8(px, n, f);
        continue;
      }
#endif
      for (int i = 0; i < n; ++i) {
        uint8_t* q = px + 3 * i;
        const uint8_t g = color::pil_luma(q[0], q[1], q[2]);
        q[0] = color::pil_blend(g, q[0], f);
        q[1] = color::pil_blend(g, q[1], f);
        q[2] = color::pil_blend(g, q[2], f);
      }
    } else if (C == 3 && op == color::kHue) {
#if defined(FASTLOAD_SHUFFLEVECTOR)
      if constexpr (WIDE) {
        simd::pil_hue_row8(px, n, t.hue_shift);
        continue;
      }
#endif
      for (int i = 0; i < n; ++i) color::pil_hue(px + 3 * i, 3, t.hue_shift);
    }
  }
  if (grayscale)
    for (int i = 0; i < n; ++i) color::pil_grayscale(px + i * C, C, px + i * C, C);
}

template <bool WIDE>
FASTLOAD_INLINE uint64_t luma_row_sum(const uint8_t* px, int n, int C) {
#if defined(FASTLOAD_SHUFFLEVECTOR)
  if constexpr (WIDE) {
    if (C == 3) return simd::luma_sum_row8(px, n);
  }
#endif
  uint64_t sum = 0;
  if (C == 3) {
    for (int i = 0; i < n; ++i) sum += augment::color::pil_luma(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
  } else {
    for (int i = 0; i < n * C; i += C) sum += px[i];
  }
  return sum;
}

// The first colour steps on uint8 row y: the jitter ops before contrast (all of them,
// and the grayscale, when contrast does not run), and the luma sum contrast needs.
template <bool WIDE>
FASTLOAD_INLINE void color_first_pixels(Plan& p, int y) {
  const augment::color::ColorPass& cp = *p.color;
  const int C = p.channels, OW = p.out_w;
  uint8_t* row = p.pixels + static_cast<size_t>(y) * OW * C;
  const int split = cp.split();
  color_ops_row<WIDE>(cp, p.color_rows, row, OW, C, 0, split, split == 4 && cp.grayscale);
  if (split < 4) p.luma_sum += luma_row_sum<WIDE>(row, OW, C);
}

// The same on output row y resampled into hrow (nearest, whose float resample is
// Pillow's): first Pillow's uint8 resize output.
template <bool WIDE>
FASTLOAD_INLINE void color_first_row(Plan& p, int y) {
  const int C = p.channels, OW = p.out_w;
  const int lane = C == 3 ? 4 : 1;
  uint8_t* row = p.pixels + static_cast<size_t>(y) * OW * C;
  for (int x = 0; x < OW; ++x)
    for (int c = 0; c < C; ++c) row[x * C + c] = augment::color::resampled_to_uint8(p.hrow[x * lane + c]);
  color_first_pixels<WIDE>(p, y);
}

// The second step: contrast and the steps after it, back to hrow, the value map and
// store; then the erased rectangle over the stored values.
template <bool WIDE, typename S, typename CastFn>
FASTLOAD_INLINE void color_finish(Plan& p, const OutputView& out, CastFn cast) {
  const augment::color::ColorPass& cp = *p.color;
  const int C = p.channels, OW = p.out_w;
  const int split = cp.split();
  if (cp.quantized() && split < 4)
    color_rows_contrast(p.color_rows, cp,
                        augment::color::pil_contrast_mean(p.luma_sum, static_cast<int64_t>(p.out_h) * OW));
  S* base = static_cast<S*>(out.data);
  for (int y = 0; y < p.out_h; ++y) {
    if (cp.quantized()) {
      uint8_t* row = p.pixels + static_cast<size_t>(y) * OW * C;
      if (split < 4) color_ops_row<WIDE>(cp, p.color_rows, row, OW, C, split, 4, cp.grayscale);
#if defined(FASTLOAD_SHUFFLEVECTOR)
      if (WIDE && C == 3) {
        simd::rgb_to_rgbx_row8(row, OW, p.hrow);
      } else
#endif
      if (C == 3) {
        for (int x = 0; x < OW; ++x) {
          p.hrow[4 * x] = row[3 * x];
          p.hrow[4 * x + 1] = row[3 * x + 1];
          p.hrow[4 * x + 2] = row[3 * x + 2];
        }
      } else {
        for (int x = 0; x < OW * C; ++x) p.hrow[x] = row[x];
      }
      store_row(p, base + y * out.stride_y, out.stride_c, out.stride_x, cast);
    }
    if (cp.erases() && y >= cp.erase.top && y < cp.erase.top + cp.erase.height) {
      for (int c = 0; c < C; ++c) {
        S* d = base + y * out.stride_y + c * out.stride_c;
        for (int x = cp.erase.left; x < cp.erase.left + cp.erase.width; ++x)
          d[x * out.stride_x] = cast(augment::color::erase_value_at(cp, c, y, x));
      }
    }
  }
}

// The uint8 stage's whole-image steps (GaussianBlur, blur_cpu.h; then TrivialAugmentWide /
// RandAugment, autoaugment_cpu.h, or AugMix, augmix_cpu.h) after the first colour steps: contrast's pass and the
// colour steps after it run first, so that they see the colour ops' result. Returns the
// record the store then runs: `rest`, cp without the colour steps already done, or &cp
// when cp has no whole-image step.
inline const augment::color::ColorPass* whole_image_stage(const augment::color::ColorPass& cp, uint8_t* pixels,
                                                          int out_h, int out_w, int channels, uint64_t luma_sum,
                                                          augment::color::ColorPass& rest) {
  if (!cp.whole_image()) return &cp;
  const int64_t n = static_cast<int64_t>(out_h) * out_w;
  const int mean = augment::color::pil_contrast_mean(luma_sum, n);
  for (int64_t i = 0; i < n; ++i) augment::color::color_second(cp, pixels + i * channels, channels, mean);
  if (cp.blur.on()) gaussian_blur_uint8(pixels, out_h, out_w, channels, cp.blur);
  auto_augment_uint8(cp.augment, pixels, out_h, out_w, channels);
  augmix_uint8(cp.augmix, pixels, out_h, out_w, channels);
  rest = cp;
  rest.jitter = false;  // done: the store's second colour step then does nothing
  rest.grayscale = false;
  return &rest;
}

template <bool WIDE, typename S, typename CastFn>
FASTLOAD_INLINE void run_cast(Plan& p, const ImageView& in, const OutputView& out, CastFn cast) {
  S* base = static_cast<S*>(out.data);
  auto store = [&](int y) FASTLOAD_INLINE_LAMBDA {
    store_row(p, base + y * out.stride_y, out.stride_c, out.stride_x, cast);
  };
  const bool colour = p.color != nullptr && p.color->any();
  const bool quantized = colour && p.color->quantized();
  if (!quantized) {  // no colour steps, or erasing only: the float values are stored as usual
    run_any_rows<WIDE>(p, in, store);
    if (!colour) return;
  } else {
    color_rows_init(p.color_rows, *p.color);
    p.luma_sum = 0;
    if (p.pixels_ready) {
      for (int y = 0; y < p.out_h; ++y) color_first_pixels<WIDE>(p, y);
    } else {
      run_any_rows<WIDE>(p, in, [&](int y) FASTLOAD_INLINE_LAMBDA { color_first_row<WIDE>(p, y); });
    }
  }
  // GaussianBlur and the AutoAugment ops, after every colour step: p.color becomes what is left to store.
  augment::color::ColorPass rest;
  if (p.pixels_ready) p.color = whole_image_stage(*p.color, p.pixels, p.out_h, p.out_w, p.channels, p.luma_sum, rest);
  color_finish<WIDE, S>(p, out, cast);
}

template <bool WIDE, typename T>
FASTLOAD_INLINE void run_sample(Plan& p, const ImageView& in, const OutputView& out) {
  using S = typename Cast<T>::Storage;
  if constexpr (std::is_same_v<T, uint8_t>) {
    if (p.uint8_bounded)
      return run_cast<WIDE, S>(p, in, out,
                               [](float v) FASTLOAD_INLINE_LAMBDA { return augment::to_uint8_bounded(v); });
  }
  run_cast<WIDE, S>(p, in, out, [](float v) FASTLOAD_INLINE_LAMBDA { return Cast<T>::apply(v); });
}

template <typename T>
void run_sample_default(Plan& p, const ImageView& in, const OutputView& out) {
  run_sample<false, T>(p, in, out);
}

#if defined(FASTLOAD_HAVE_AVX2_PATH)
template <typename T>
FASTLOAD_AVX2 void run_sample_avx2(Plan& p, const ImageView& in, const OutputView& out) {
  run_sample<true, T>(p, in, out);
}

// FASTLOAD_NO_AVX2=1 forces the baseline loops (tests and benchmarks of that path).
bool use_avx2() {
  static const bool use = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          std::getenv("FASTLOAD_NO_AVX2") == nullptr;
  return use;
}
#endif

template <typename T>
void dispatch_sample(Plan& p, const ImageView& in, const OutputView& out) {
#if defined(FASTLOAD_HAVE_AVX2_PATH)
  if (use_avx2()) return run_sample_avx2<T>(p, in, out);
#endif
  run_sample_default<T>(p, in, out);
}

// ---- Pillow's 8-bit resample, for the colour ops' PIL stage ----------------------------
// torchvision's ColorJitter sees the uint8 image of Pillow's resize, whose rounding is
// its own: coefficients in double, normalised, then 22-bit fixed point summed in int32
// (Pillow's own accumulator: |sum| < 255 * 1.25 * 2^22 < 2^31), one pass into a uint8
// image, then the other (Resample.c). A float resample rounds differently on a few
// percent of values (ties at .5 are common when enlarging), and the jitter's slopes
// would carry that on; so the PIL stage reproduces it exactly, pass order included.
constexpr int kPilPrecision = 22;
constexpr int32_t kPilHalf = int32_t{1} << (kPilPrecision - 1);

double pil_filter(double x, Interpolation mode) {
  x = std::fabs(x);
  if (mode == Interpolation::kBicubic) {
    const double a = -0.5;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
  }
  return x < 1.0 ? 1.0 - x : 0.0;
}

// One axis as fixed windows, so the loops never branch on a tap count: output i reads
// source indices first[i] .. first[i] + taps - 1 with the weights k[i * taps ..],
// Pillow's (precompute_coeffs + normalize_coeffs_8bpc), moved right where the window had
// to move left to end inside the image, zero elsewhere (a zero weight adds an exact 0).
// live[i] is false for a centre outside the image (the kernel's padding rule, as
// torchvision's CenterCrop pads with 0): all its weights are zero, so it reads 0.
struct PilAxis {
  std::vector<int> first;
  std::vector<int32_t> k;
  std::vector<uint8_t> live;
  int taps = 0;
  int lo = 0, hi = 0;  // the source indices the windows cover: [lo, hi); empty: no live output
};

void pil_axis(double in0, double size, int in_size, int out_size, Interpolation mode, bool mirror, PilAxis& a) {
  const double scale = size / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = (mode == Interpolation::kBicubic ? 2.0 : 1.0) * filterscale;
  const double ss = 1.0 / filterscale;  // Pillow multiplies by the inverse (a division rounds otherwise)
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  const int taps = std::min(ksize, in_size);
  a.taps = taps;
  a.first.assign(static_cast<size_t>(out_size), 0);
  a.live.assign(static_cast<size_t>(out_size), 0);
  a.k.assign(static_cast<size_t>(out_size) * taps, 0);
  a.lo = INT_MAX;
  a.hi = 0;
  thread_local std::vector<double> w;
  w.assign(static_cast<size_t>(ksize), 0.0);
  for (int i = 0; i < out_size; ++i) {
    const double centre = in0 + (i + 0.5) * scale;
    const int o = mirror ? out_size - 1 - i : i;
    if (!(centre >= 0.0 && centre < in_size)) continue;
    int xmin = static_cast<int>(centre - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(centre + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    const int count = std::min(xmax - xmin, ksize);
    double ww = 0.0;
    for (int x = 0; x < count; ++x) {
      w[x] = pil_filter((x + xmin - centre + 0.5) * ss, mode);
      ww += w[x];
    }
    // count <= in_size - xmin, so the moved window still holds every tap.
    const int start = std::min(xmin, in_size - taps);
    int32_t* k = a.k.data() + static_cast<size_t>(o) * taps + (xmin - start);
    for (int x = 0; x < count; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      k[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPilPrecision) : 0.5 + v * (1 << kPilPrecision));
    }
    a.first[o] = start;
    a.live[o] = 1;
    a.lo = std::min(a.lo, start);
    a.hi = std::max(a.hi, start + taps);
  }
  if (a.lo >= a.hi) {
    a.lo = a.hi = 0;
    return;
  }
  for (int i = 0; i < out_size; ++i)
    if (!a.live[i]) a.first[i] = a.lo;  // zero weights, a window inside [lo, hi)
}

// Pillow 13 runs the vertical pass first where the height shrinks by more than twice
// as many pixels as the width (ImagingResampleInner: in_h > out_h and in_h - out_h >
// 2 (in_w - out_w), read off its outputs over thousands of sizes); the horizontal pass
// first otherwise, as every earlier Pillow. The image Pillow resizes is torchvision's
// crop, the box here.
bool pil_vertical_first(const Box& box, int out_h, int out_w) {
  const double dh = static_cast<double>(box.height) - out_h;
  const double dw = static_cast<double>(box.width) - out_w;
  return dh > 0.0 && dh > 2.0 * dw;
}

FASTLOAD_INLINE uint8_t pil_clip8(int32_t ss) {
  const int32_t v = ss >> kPilPrecision;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

#if defined(FASTLOAD_VECTOR_EXT)
typedef int32_t PilLanes __attribute__((vector_size(16)));
typedef int32_t PilLanes8 __attribute__((vector_size(32)));

FASTLOAD_INLINE PilLanes pil_load4(const int32_t* p) { return load_lanes<PilLanes>(p); }
#endif

// The horizontal windows of an RGB row laid out for the 8-lane loop: output pixels in
// quads (out_w rounded up, the extra ones reading column lo with zero weights), each
// pixel pair's tap j one 8-lane weight vector (pixel 2q in lanes 0-3, 2q+1 in 4-7).
struct PilQuads {
  std::vector<int> first;       // [quads * 4], relative to the axis' lo
  std::vector<int32_t> weights;  // [quads * 2][taps][8]
};

void pil_quads(const PilAxis& a, int out_w, PilQuads& q) {
  const int T = a.taps, padded = (out_w + 3) / 4 * 4;
  q.first.assign(static_cast<size_t>(padded), 0);
  q.weights.assign(static_cast<size_t>(padded / 2) * T * 8, 0);
  for (int x = 0; x < out_w; ++x) {
    q.first[x] = a.first[x] - a.lo;
    int32_t* w = q.weights.data() + static_cast<size_t>(x / 2) * T * 8 + (x % 2) * 4;
    for (int j = 0; j < T; ++j)
      for (int lane = 0; lane < 4; ++lane) w[8 * j + lane] = a.k[static_cast<size_t>(x) * T + j];
  }
}

// One row through the horizontal windows: src[0] is column a.lo of the row (C values a
// pixel), dst gets out_w pixels. RGB widens [lo, hi) once into int32 (wide, 3 values a
// pixel and a zero tail), so a tap is one multiply-add for the three channels (and a
// spare lane); WIDE (AVX2) serves two output pixels per 8-lane multiply-add and packs
// four pixels' 12 bytes at once.
template <int TAPS, bool WIDE>
FASTLOAD_INLINE void pil_row(const uint8_t* __restrict src, const PilAxis& a, const PilQuads& q, int out_w, int C,
                             int32_t* __restrict wide, uint8_t* __restrict dst) {
  const int T = TAPS > 0 ? TAPS : a.taps;
#if defined(FASTLOAD_VECTOR_EXT)
  if (C == 3) {
    const int n = 3 * (a.hi - a.lo);
    for (int i = 0; i < n; ++i) wide[i] = src[i];
    for (int i = n; i < n + 4; ++i) wide[i] = 0;
#if defined(FASTLOAD_SHUFFLEVECTOR)
    if constexpr (WIDE) {
      const int32_t* w = q.weights.data();
      for (int x = 0; x < out_w; x += 4, w += 16 * T) {
        const int32_t* s0 = wide + 3 * q.first[x];
        const int32_t* s1 = wide + 3 * q.first[x + 1];
        const int32_t* s2 = wide + 3 * q.first[x + 2];
        const int32_t* s3 = wide + 3 * q.first[x + 3];
        PilLanes8 acc01, acc23;
        for (int lane = 0; lane < 8; ++lane) acc01[lane] = acc23[lane] = kPilHalf;
        for (int j = 0; j < T; ++j) {
          PilLanes8 w01, w23;
          std::memcpy(&w01, w + 8 * j, sizeof(w01));
          std::memcpy(&w23, w + 8 * (T + j), sizeof(w23));
          acc01 += __builtin_shufflevector(pil_load4(s0 + 3 * j), pil_load4(s1 + 3 * j), 0, 1, 2, 3, 4, 5, 6, 7) * w01;
          acc23 += __builtin_shufflevector(pil_load4(s2 + 3 * j), pil_load4(s3 + 3 * j), 0, 1, 2, 3, 4, 5, 6, 7) * w23;
        }
        const PilLanes8 zero = {}, top = zero + 255;
        acc01 >>= kPilPrecision;
        acc23 >>= kPilPrecision;
        acc01 = acc01 < zero ? zero : (acc01 > top ? top : acc01);
        acc23 = acc23 < zero ? zero : (acc23 > top ? top : acc23);
        // Each lane's low byte is its value: RGB of the four pixels, spare lanes last.
        const simd::Bytes16 rgb =
            __builtin_shufflevector(reinterpret_cast<simd::Bytes32&>(acc01), reinterpret_cast<simd::Bytes32&>(acc23),
                                    0, 4, 8, 16, 20, 24, 32, 36, 40, 48, 52, 56, 12, 28, 44, 60);
        if (x + 6 <= out_w) {
          std::memcpy(dst + 3 * x, &rgb, sizeof(rgb));  // the 4 spare bytes land where the next quad writes
        } else {
          for (int i = 0; i < 3 * std::min(4, out_w - x); ++i) dst[3 * x + i] = rgb[i];
        }
      }
      return;
    }
#endif
    const int* first = a.first.data();
    const int32_t* k = a.k.data();
    for (int x = 0; x < out_w; ++x, k += T, dst += 3) {
      const int32_t* s = wide + 3 * (first[x] - a.lo);
      PilLanes acc = {kPilHalf, kPilHalf, kPilHalf, kPilHalf};
      for (int j = 0; j < T; ++j) acc += pil_load4(s + 3 * j) * k[j];
      const PilLanes zero = {0, 0, 0, 0}, top = {255, 255, 255, 255};
      acc >>= kPilPrecision;
      acc = acc < zero ? zero : acc;
      acc = acc > top ? top : acc;
      dst[0] = static_cast<uint8_t>(acc[0]);
      dst[1] = static_cast<uint8_t>(acc[1]);
      dst[2] = static_cast<uint8_t>(acc[2]);
    }
    return;
  }
#endif
  (void)q;
  (void)wide;
  const int* first = a.first.data();
  const int32_t* k = a.k.data();
  for (int x = 0; x < out_w; ++x, k += T, dst += C) {
    const uint8_t* s = src + static_cast<int64_t>(first[x] - a.lo) * C;
    for (int c = 0; c < C; ++c) {
      int32_t ss = kPilHalf;
      for (int j = 0; j < T; ++j) ss += static_cast<int32_t>(s[j * C + c]) * k[j];
      dst[c] = pil_clip8(ss);
    }
  }
}

// One pass of the other axis: dst[i] = Pillow's sum over the window's rows (base, base +
// stride, ...) of value i, i < n. Column-wise, so the loops vectorise; a zero weight
// (padding of the window) skips its row, exactly: it adds 0.
FASTLOAD_INLINE void pil_sums(const uint8_t* base, int64_t stride, const int32_t* k, int taps, int n, int32_t* acc,
                              uint8_t* dst) {
  for (int i = 0; i < n; ++i) acc[i] = kPilHalf;
  for (int j = 0; j < taps; ++j) {
    const int32_t kj = k[j];
    if (kj == 0) continue;
    const uint8_t* r = base + j * stride;
    for (int i = 0; i < n; ++i) acc[i] += static_cast<int32_t>(r[i]) * kj;
  }
  for (int i = 0; i < n; ++i) dst[i] = pil_clip8(acc[i]);
}

struct PilPasses {
  const ImageView* in;
  const PilAxis* ax;
  const PilAxis* ay;
  int out_h, out_w;
  bool vertical_first;
  uint8_t* temp;      // horizontal first: [ay.hi - ay.lo][out_w * C]; vertical first: [ax.hi - ax.lo][C]
  const PilQuads* quads;  // ax for the 8-lane loop
  int32_t* wide;      // [3 (ax.hi - ax.lo) + 4]
  int32_t* acc;       // [max(out_w, ax.hi - ax.lo) * C]
  uint8_t* pixels;    // out_h x out_w x C
};

template <int TAPS, bool WIDE>
FASTLOAD_INLINE void pil_run_taps(const PilPasses& p) {
  const ImageView& in = *p.in;
  const PilAxis& ax = *p.ax;
  const PilAxis& ay = *p.ay;
  const int C = in.channels, OW = p.out_w;
  const size_t row_bytes = static_cast<size_t>(OW) * C;
  if (p.vertical_first) {
    const int n = (ax.hi - ax.lo) * C;
    for (int y = 0; y < p.out_h; ++y) {
      uint8_t* dst = p.pixels + static_cast<size_t>(y) * row_bytes;
      if (!ay.live[y]) {
        std::memset(dst, 0, row_bytes);
        continue;
      }
      const uint8_t* base = in.data + static_cast<int64_t>(ay.first[y]) * in.row_stride + static_cast<int64_t>(ax.lo) * C;
      pil_sums(base, in.row_stride, ay.k.data() + static_cast<size_t>(y) * ay.taps, ay.taps, n, p.acc, p.temp);
      pil_row<TAPS, WIDE>(p.temp, ax, *p.quads, OW, C, p.wide, dst);
    }
    return;
  }
  for (int r = ay.lo; r < ay.hi; ++r)
    pil_row<TAPS, WIDE>(in.data + static_cast<int64_t>(r) * in.row_stride + static_cast<int64_t>(ax.lo) * C, ax,
                        *p.quads, OW, C, p.wide, p.temp + static_cast<size_t>(r - ay.lo) * row_bytes);
  for (int y = 0; y < p.out_h; ++y) {
    uint8_t* dst = p.pixels + static_cast<size_t>(y) * row_bytes;
    if (!ay.live[y]) {
      std::memset(dst, 0, row_bytes);
      continue;
    }
    pil_sums(p.temp + static_cast<size_t>(ay.first[y] - ay.lo) * row_bytes, static_cast<int64_t>(row_bytes),
             ay.k.data() + static_cast<size_t>(y) * ay.taps, ay.taps, static_cast<int>(row_bytes), p.acc, dst);
  }
}

// The horizontal loop unrolled for the tap counts of everyday scales (bilinear 3 up, 5
// down to 2x; bicubic 5 up, 7 down to 1.5x, 9 to 2x); the rest reads the count.
template <bool WIDE>
FASTLOAD_INLINE void pil_run(const PilPasses& p) {
  switch (p.ax->taps) {
    case 1: return pil_run_taps<1, WIDE>(p);
    case 2: return pil_run_taps<2, WIDE>(p);
    case 3: return pil_run_taps<3, WIDE>(p);
    case 4: return pil_run_taps<4, WIDE>(p);
    case 5: return pil_run_taps<5, WIDE>(p);
    case 6: return pil_run_taps<6, WIDE>(p);
    case 7: return pil_run_taps<7, WIDE>(p);
    case 8: return pil_run_taps<8, WIDE>(p);
    case 9: return pil_run_taps<9, WIDE>(p);
    default: return pil_run_taps<0, WIDE>(p);
  }
}

void pil_run_default(const PilPasses& p) { pil_run<false>(p); }

#if defined(FASTLOAD_HAVE_AVX2_PATH)
FASTLOAD_AVX2 void pil_run_avx2(const PilPasses& p) { pil_run<true>(p); }
#endif

// The sample resampled as Pillow does, into pixels (uint8 HWC, out_h x out_w).
void pil_resample(const ImageView& in, const Box& box, const Resample& resample, int out_h, int out_w,
                  uint8_t* pixels) {
  const int C = in.channels;
  thread_local PilAxis ax, ay;
  pil_axis(box.left, box.width, in.width, out_w, resample.interpolation, resample.flip, ax);
  pil_axis(box.top, box.height, in.height, out_h, resample.interpolation, resample.flip_v, ay);
  if (ax.lo >= ax.hi || ay.lo >= ay.hi) {
    std::memset(pixels, 0, static_cast<size_t>(out_h) * out_w * C);
    return;
  }
  // One set of buffers per thread, reused (ResizeScratch's layout is shared with the engine).
  thread_local std::vector<uint8_t> temp;
  thread_local std::vector<int32_t> acc, wide;
  const bool vertical_first = pil_vertical_first(box, out_h, out_w);
  const int span = ax.hi - ax.lo;
  temp.resize(vertical_first ? static_cast<size_t>(span) * C
                             : static_cast<size_t>(ay.hi - ay.lo) * out_w * C);
  acc.resize(static_cast<size_t>(std::max(out_w, span)) * C);
  wide.resize(static_cast<size_t>(span) * 3 + 4);
  thread_local PilQuads quads;  // read by the AVX2 loop only
  const PilPasses passes{&in, &ax, &ay, out_h, out_w, vertical_first, temp.data(), &quads, wide.data(), acc.data(),
                         pixels};
#if defined(FASTLOAD_HAVE_AVX2_PATH)
  if (use_avx2()) {
    if (C == 3) pil_quads(ax, out_w, quads);
    return pil_run_avx2(passes);
  }
#endif
  pil_run_default(passes);
}

}  // namespace

const char* crop_resize_flip_normalize_cpu_path() {
#if defined(FASTLOAD_HAVE_AVX2_PATH)
  if (use_avx2()) return "avx2";
#endif
  return "baseline";
}

void crop_resize_flip_normalize_cpu(const ImageView& in, const Box& box, const Resample& resample, float scale,
                                    const float* mean, const float* std, const OutputView& out,
                                    ResizeScratch& scratch, const augment::color::ColorPass* color) {
  if (out.height <= 0 || out.width <= 0) return;
  Plan plan;
  const bool quantized = color != nullptr && color->quantized();
  build_plan(in, box, resample, scale, mean, std, out, scratch, plan, quantized);
  plan.color = color;
  plan.luma_sum = 0;
  plan.pixels = nullptr;
  plan.pixels_ready = false;
  if (quantized) {
    scratch.color_pixels.resize(static_cast<size_t>(out.height) * out.width * in.channels);
    plan.pixels = scratch.color_pixels.data();
    if (resample.interpolation != Interpolation::kNearest) {  // nearest: the float path is Pillow's already
      pil_resample(in, box, resample, out.height, out.width, plan.pixels);
      pad_uint8_stage(*color, in, box, resample, out.height, out.width, plan.pixels);  // RandomCrop's padding
      plan.pixels_ready = true;
    }
  }
  switch (out.dtype) {
    case c10::ScalarType::Byte:
      return dispatch_sample<uint8_t>(plan, in, out);
    case c10::ScalarType::Float:
      return dispatch_sample<float>(plan, in, out);
    case c10::ScalarType::Half:
      return dispatch_sample<c10::Half>(plan, in, out);
    case c10::ScalarType::BFloat16:
      return dispatch_sample<c10::BFloat16>(plan, in, out);
    default:
      break;  // the ops validate the dtype; the engine only makes these four
  }
}

// ---- the ops (their argument checks: crop_resize_flip_normalize.cpp) ------------------------

namespace {

constexpr const char* kBatchOp = "crop_resize_flip_normalize_batch";

at::Tensor crop_resize_flip_normalize_op(const at::Tensor& image, at::ArrayRef<double> box,
                                         at::IntArrayRef size, bool flip, double scale,
                                         at::ArrayRef<double> mean, at::ArrayRef<double> std,
                                         at::ScalarType dtype, bool channels_last, bool flip_v,
                                         int64_t interpolation) {
  float mean_f[3], std_f[3];
  check_arguments(image, box, size, scale, mean, std, dtype, mean_f, std_f);
  const Resample resample{flip, flip_v, check_interpolation("crop_resize_flip_normalize", interpolation)};
  const int64_t H = image.size(0), W = image.size(1), C = image.size(2);

  const int64_t OH = size[0], OW = size[1];
  // channels_last for [C, H, W]: HWC memory, i.e. strides (1, W*C, C).
  at::Tensor out = channels_last
                       ? at::empty_strided({C, OH, OW}, {1, OW * C, C}, image.options().dtype(dtype))
                       : at::empty({C, OH, OW}, image.options().dtype(dtype));
  if (out.numel() == 0) return out;
  ImageView in{image.data_ptr<uint8_t>(), static_cast<int>(H), static_cast<int>(W), static_cast<int>(C),
               image.stride(0)};
  OutputView view{out.data_ptr(), dtype, static_cast<int>(C), static_cast<int>(OH), static_cast<int>(OW),
                  out.stride(0), out.stride(1), out.stride(2)};
  ResizeScratch scratch;
  crop_resize_flip_normalize_cpu(in, Box{float(box[0]), float(box[1]), float(box[2]), float(box[3])}, resample,
                                 static_cast<float>(scale), mean_f, std_f, view, scratch);
  return out;
}

}  // namespace

namespace {

void crop_resize_flip_normalize_batch_op(const at::Tensor& images, const at::Tensor& shapes_in,
                                         const at::Tensor& boxes_in, const at::Tensor& flips_in, double scale,
                                         const at::Tensor& mean_in, const at::Tensor& std_in,
                                         const at::Tensor& out, int64_t interpolation,
                                         const std::optional<at::Tensor>& color_in) {
  check_batch_arguments(images, shapes_in, boxes_in, flips_in, scale, mean_in, std_in, out);
  if (color_in.has_value()) check_color(*color_in, out);
  const auto* color = color_in.has_value()
                          ? reinterpret_cast<const augment::color::ColorPass*>(color_in->data_ptr<uint8_t>())
                          : nullptr;
  const Interpolation mode = check_interpolation(kBatchOp, interpolation);
  const int64_t N = out.size(0), C = out.size(1), OH = out.size(2), OW = out.size(3);
  const at::Tensor shapes = shapes_in.contiguous(), boxes = boxes_in.contiguous(), flips = flips_in.contiguous();
  const at::Tensor mean = mean_in.contiguous(), std = std_in.contiguous();
  const int64_t* shape = shapes.data_ptr<int64_t>();
  const float* box = boxes.data_ptr<float>();
  const bool* flip = flips.data_ptr<bool>();
  const int64_t flip_columns = flips.dim() == 2 ? 2 : 1;  // [N]: left-right only; [N, 2]: both
  check_normalize(kBatchOp, mean.data_ptr<float>(), std.data_ptr<float>(), static_cast<int>(C));
  // Validate every sample before writing anything: an error leaves `out` untouched.
  const int64_t numel = images.numel();
  for (int64_t i = 0; i < N; ++i) {
    const int64_t offset = shape[4 * i], h = shape[4 * i + 1], w = shape[4 * i + 2], stride = shape[4 * i + 3];
    FASTLOAD_CHECK_VALUE(batch_image_valid(shape + 4 * i, C, numel), kBatchOp, "expected shapes[", i,
                         "] = (offset, height, width, row_stride) of an HWC image with ", C,
                         " channels inside images (", numel, " bytes; offset >= 0, height, width > 0, "
                         "width * channels < 2^31, row_stride >= width * channels), got (", offset, ", ", h,
                         ", ", w, ", ", stride, "). Check the packing offsets.");
    check_box(kBatchOp, box[4 * i], box[4 * i + 1], box[4 * i + 2], box[4 * i + 3], i);
    FASTLOAD_CHECK_VALUE(color == nullptr || augment::color::color_pass_valid(color[i], static_cast<int>(OH),
                                                                              static_cast<int>(OW)),
                         kBatchOp, "expected color[", i, "] to be a colour record of a ", OH, "x", OW,
                         " sample (erased rectangle inside it, the jitter order a permutation), got another. "
                         "Make the records with fastload._C.color_passes for this output size.");
  }
  if (N == 0 || out.numel() == 0) return;
  const uint8_t* data = images.data_ptr<uint8_t>();
  char* out_base = static_cast<char*>(out.data_ptr());
  const int64_t item = out.element_size();
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    ResizeScratch scratch;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t* s = shape + 4 * i;
      const float* b = box + 4 * i;
      ImageView in{data + s[0], static_cast<int>(s[1]), static_cast<int>(s[2]), static_cast<int>(C), s[3]};
      OutputView view{out_base + i * out.stride(0) * item, out.scalar_type(), static_cast<int>(C),
                      static_cast<int>(OH), static_cast<int>(OW), out.stride(1), out.stride(2), out.stride(3)};
      const Resample resample{flip[flip_columns * i], flip_columns == 2 && flip[2 * i + 1], mode};
      crop_resize_flip_normalize_cpu(in, Box{b[0], b[1], b[2], b[3]}, resample, static_cast<float>(scale),
                                     mean.data_ptr<float>(), std.data_ptr<float>(), view, scratch,
                                     color != nullptr ? color + i : nullptr);
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) {
  m.impl("crop_resize_flip_normalize", &crop_resize_flip_normalize_op);
  m.impl("crop_resize_flip_normalize_batch", &crop_resize_flip_normalize_batch_op);
}

}  // namespace fastload
