// The passes of Pillow's 8-bit resample (resample_pil_cpu.h), compiled once per
// instruction set: resample_pil_cpu.cpp includes this file for the baseline build,
// resample_pil_cpu_avx2.cpp for AVX2 + FMA (FASTLOAD_ISA_AVX2 = 0 or 1, before the
// include; simd_cpu.h says why the pragma and not -mavx2). Integer arithmetic, Pillow's:
// every build gives the same bytes.
// No include guard: one inclusion per translation unit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "augment/simd_cpu.h"  // before color_cpu_simd.h: FASTLOAD_INLINE, FASTLOAD_SHUFFLEVECTOR
#include "augment/color_cpu_simd.h"  // simd::Bytes16, Bytes32
#include "augment/resample_pil_cpu.h"

#if !defined(FASTLOAD_ISA_AVX2)
#error "define FASTLOAD_ISA_AVX2 (0 or 1) before including resample_pil_cpu_impl.h"
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

FASTLOAD_INLINE uint8_t pil_clip8(int32_t ss) {
  const int32_t v = ss >> kPilPrecision;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

#if defined(FASTLOAD_VECTOR_EXT)
typedef int32_t PilLanes __attribute__((vector_size(16)));
typedef int32_t PilLanes8 __attribute__((vector_size(32)));

FASTLOAD_INLINE PilLanes pil_load4(const int32_t* p) { return load_lanes<PilLanes>(p); }
#endif

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
FASTLOAD_INLINE void run_passes(const PilPasses& p) {
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

}  // namespace

void pil_run(const PilPasses& p) {
  if (kWide && p.in->channels == 3) pil_quads(*p.ax, p.out_w, *p.quads);
  run_passes<kWide>(p);
}

}  // namespace fastload::augment::{avx2,baseline}
#if FASTLOAD_ISA_AVX2
FASTLOAD_AVX2_END
#endif
