// Pillow's 8-bit resample, for the colour ops' PIL stage of the fused CPU pass.
// torchvision's ColorJitter sees the uint8 image of Pillow's resize, whose rounding is
// its own: coefficients in double, normalised, then 22-bit fixed point summed in int32
// (Pillow's own accumulator: |sum| < 255 * 1.25 * 2^22 < 2^31), one pass into a uint8
// image, then the other (Resample.c). A float resample rounds differently on a few
// percent of values (ties at .5 are common when enlarging), and the jitter's slopes
// would carry that on; so the PIL stage reproduces it exactly, pass order included.
//
// The windows and buffers are set up here (baseline ISA); the passes run in
// resample_pil_cpu_impl.h, one build per instruction set (baseline::, avx2::).
#pragma once

#include <cstdint>
#include <vector>

#include "augment/crop_resize_flip_normalize_cpu.h"  // ImageView, Resample
#include "augment/geometry.h"  // Box, Interpolation

namespace fastload::augment {

constexpr int kPilPrecision = 22;
constexpr int32_t kPilHalf = int32_t{1} << (kPilPrecision - 1);

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

void pil_axis(double in0, double size, int in_size, int out_size, Interpolation mode, bool mirror, PilAxis& a);

// Pillow 13 runs the vertical pass first where the height shrinks by more than twice
// as many pixels as the width (ImagingResampleInner: in_h > out_h and in_h - out_h >
// 2 (in_w - out_w), read off its outputs over thousands of sizes); the horizontal pass
// first otherwise, as every earlier Pillow. The image Pillow resizes is torchvision's
// crop, the box here.
bool pil_vertical_first(const Box& box, int out_h, int out_w);

// The horizontal windows of an RGB row laid out for the 8-lane loop: output pixels in
// quads (out_w rounded up, the extra ones reading column lo with zero weights), each
// pixel pair's tap j one 8-lane weight vector (pixel 2q in lanes 0-3, 2q+1 in 4-7).
struct PilQuads {
  std::vector<int> first;       // [quads * 4], relative to the axis' lo
  std::vector<int32_t> weights;  // [quads * 2][taps][8]
};

void pil_quads(const PilAxis& a, int out_w, PilQuads& q);

// One sample's two passes: the windows, the buffers, the result.
struct PilPasses {
  const ImageView* in;
  const PilAxis* ax;
  const PilAxis* ay;
  int out_h, out_w;
  bool vertical_first;
  uint8_t* temp;      // horizontal first: [ay.hi - ay.lo][out_w * C]; vertical first: [ax.hi - ax.lo][C]
  PilQuads* quads;    // ax for the 8-lane loop (the AVX2 build fills it)
  int32_t* wide;      // [3 (ax.hi - ax.lo) + 4]
  int32_t* acc;       // [max(out_w, ax.hi - ax.lo) * C]
  uint8_t* pixels;    // out_h x out_w x C
};

// The passes, per instruction set (the AVX2 build lays out p.quads first).
using PilRun = void (*)(const PilPasses& p);
namespace baseline {
void pil_run(const PilPasses& p);
}
namespace avx2 {
void pil_run(const PilPasses& p);
}

// The sample resampled as Pillow does, into pixels (uint8 HWC, out_h x out_w), by `run`
// (the build of the passes this process runs).
void pil_resample(const ImageView& in, const Box& box, const Resample& resample, int out_h, int out_w,
                  uint8_t* pixels, PilRun run);

}  // namespace fastload::augment
