// The colour steps' row loops of the fused CPU pass, compiled once per instruction set:
// color_stage_cpu.cpp includes this file for the baseline build, color_stage_cpu_avx2.cpp
// for AVX2 + FMA (FASTLOAD_ISA_AVX2 = 0 or 1, before the include; simd_cpu.h says why
// the pragma and not -mavx2). The AVX2 build runs the uint8 steps on 8-lane vectors
// (color_cpu_simd.h, bit for bit color.h's scalar steps).
// No include guard: one inclusion per translation unit.
#include <cstddef>
#include <cstdint>

#include "augment/simd_cpu.h"  // before color_cpu_simd.h: FASTLOAD_INLINE, FASTLOAD_SHUFFLEVECTOR
#include "augment/color.h"
#include "augment/color_cpu_simd.h"
#include "augment/color_pass.h"
#include "augment/color_stage_cpu.h"
#include "augment/resample_float_cpu.h"

#if !defined(FASTLOAD_ISA_AVX2)
#error "define FASTLOAD_ISA_AVX2 (0 or 1) before including color_stage_cpu_impl.h"
#endif

#if FASTLOAD_ISA_AVX2
FASTLOAD_AVX2_BEGIN
namespace fastload::augment::avx2 {
#else
namespace fastload::augment::baseline {
#endif
namespace {

constexpr bool kWide = FASTLOAD_ISA_AVX2;
#if defined(FASTLOAD_SHUFFLEVECTOR)
namespace simd = color::simd;
#endif

// The jitter ops order[begin, end) over n pixels of one row, op after op (the row stays
// in L1), then the grayscale: what color_first / color_second do per pixel.
template <bool WIDE>
FASTLOAD_INLINE void color_ops_row(const color::ColorPass& cp, const ColorRows& t, uint8_t* px, int n, int C,
                                   int begin, int end, bool grayscale) {
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
    for (int i = 0; i < n; ++i) sum += color::pil_luma(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
  } else {
    for (int i = 0; i < n * C; i += C) sum += px[i];
  }
  return sum;
}

}  // namespace

void color_first_pixels(RowPlan& p, int y) {
  const color::ColorPass& cp = *p.color;
  const int C = p.channels, OW = p.out_w;
  uint8_t* row = p.pixels + static_cast<size_t>(y) * OW * C;
  const int split = cp.split();
  color_ops_row<kWide>(cp, p.color_rows, row, OW, C, 0, split, split == 4 && cp.grayscale);
  if (split < 4) p.luma_sum += luma_row_sum<kWide>(row, OW, C);
}

void color_first_row(RowPlan& p, int y) {
  const int C = p.channels, OW = p.out_w;
  const int lane = C == 3 ? 4 : 1;
  uint8_t* row = p.pixels + static_cast<size_t>(y) * OW * C;
  for (int x = 0; x < OW; ++x)
    for (int c = 0; c < C; ++c) row[x * C + c] = color::resampled_to_uint8(p.hrow[x * lane + c]);
  color_first_pixels(p, y);
}

void color_second_row(RowPlan& p, int y) {
  const color::ColorPass& cp = *p.color;
  const int C = p.channels, OW = p.out_w;
  const int split = cp.split();
  uint8_t* row = p.pixels + static_cast<size_t>(y) * OW * C;
  if (split < 4) color_ops_row<kWide>(cp, p.color_rows, row, OW, C, split, 4, cp.grayscale);
#if defined(FASTLOAD_SHUFFLEVECTOR)
  if (kWide && C == 3) {
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
}

}  // namespace fastload::augment::{avx2,baseline}
#if FASTLOAD_ISA_AVX2
FASTLOAD_AVX2_END
#endif
