// Pillow's 8-bit resample (resample_pil_cpu.h): its coefficients, the windows and the
// buffers; and the baseline build of its passes (resample_pil_cpu_impl.h; the AVX2 build:
// resample_pil_cpu_avx2.cpp).
#include "augment/resample_pil_cpu.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

namespace fastload::augment {

namespace {

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

}  // namespace

void pil_axis(double in0, double size, int in_size, int out_size, Interpolation mode, bool mirror, PilAxis& a) {
  const double scale = size / out_size;
  const double filterscale = augment::filter_scale(mode, scale);
  const double support = augment::filter_support(mode) * filterscale;
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

bool pil_vertical_first(const Box& box, int out_h, int out_w) {
  const double dh = static_cast<double>(box.height) - out_h;
  const double dw = static_cast<double>(box.width) - out_w;
  return dh > 0.0 && dh > 2.0 * dw;
}

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

void pil_resample(const ImageView& in, const Box& box, const Resample& resample, int out_h, int out_w,
                  uint8_t* pixels, PilRun run) {
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
  thread_local PilQuads quads;  // made and read by the AVX2 loop only
  const PilPasses passes{&in, &ax, &ay, out_h, out_w, vertical_first, temp.data(), &quads, wide.data(), acc.data(),
                         pixels};
  run(passes);
}

}  // namespace fastload::augment

#define FASTLOAD_ISA_AVX2 0
#include "augment/resample_pil_cpu_impl.h"
