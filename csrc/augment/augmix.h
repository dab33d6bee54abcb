// AugMix on the uint8 image: torchvision's chains of ops and their mix, and the draws
// from (seed, epoch, index).
//
// torchvision's AugMix turns a PIL image into a uint8 tensor first (its forward calls
// pil_to_tensor), so its ops follow torchvision's TENSOR path, not Pillow's:
//   ShearX/Y, TranslateX/Y, Rotate  the affine grid (_gen_affine_grid, float32) and
//                                   grid_sample (zeros padding, align_corners=False,
//                                   bilinear or nearest), rounded half to even
//                                   (augmix_cpu.cpp: torch's CPU kernel's fused steps);
//   Brightness, Color, Contrast,    _blend: ratio * img + (1 - ratio) * degenerate in
//   Sharpness                       float32, clamped, truncated; grey = trunc(0.2989 R +
//                                   0.587 G + 0.114 B); the contrast mean in float32;
//                                   Sharpness's degenerate the 3x3 (1, 5) / 13 filter,
//                                   rounded, borders kept;
//   AutoContrast                    (v - min) * (255 / (max - min)) per channel, float32;
//   Posterize, Solarize, Equalize   as Pillow's (autoaugment.h): integers either way.
// Then the mix: m0 * image + sum_i w_i * chain_i(image) in float32, truncated.
//
// Draws, torchvision's in distribution (ParamStream::kAugMix): m ~ Dirichlet(alpha,
// alpha); w ~ Dirichlet(alpha x width) * m1; per chain a depth (chain_depth, or uniform
// in 1..3), per step an op of the space uniformly, a bin uniform in [0, severity), a
// sign for signed ops. Gamma draws (Marsaglia-Tsang) give the Dirichlet weights.
#pragma once

#include <cmath>
#include <cstdint>

#include "../host_device.h"
#include "autoaugment.h"
#include "params.h"

namespace fastload::augment::augmix {

constexpr int kMaxChains = 4;  // mixture_width
constexpr int kMaxDepth = 4;   // chain_depth (torchvision's random depth is at most 3)

struct AugMixRecord {
  int32_t width = 0;  // chains; 0: off
  uint8_t bilinear = 0;
  uint8_t unused[3] = {0, 0, 0};
  float original_weight = 0.f;             // m[:, 0]
  float chain_weight[kMaxChains] = {};     // combined_weights[:, i]
  int32_t depth[kMaxChains] = {};
  autoaugment::Step steps[kMaxChains][kMaxDepth] = {};

  FASTLOAD_HD_INLINE bool on() const { return width > 0; }
};

// The plan's AugMix: its space (op ids, magnitudes [ops x bins]) and arguments.
struct AugMixSpace {
  const int32_t* ops;
  const double* magnitudes;
  int space_ops;
  int bins;
  int severity;     // bins drawn from [0, severity)
  int width;        // mixture_width
  int chain_depth;  // > 0: fixed; else uniform in 1..3
  double alpha;
  bool bilinear;
};

// A standard normal (Box-Muller on two 53-bit uniforms).
FASTLOAD_HD double standard_normal(SampleRng& rng) {
  const double u1 = rng.uniform(), u2 = rng.uniform();
  return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

// Gamma(alpha, 1): Marsaglia and Tsang's squeeze for alpha >= 1, boosted by U^(1/alpha)
// below 1.
FASTLOAD_HD double gamma_draw(double alpha, SampleRng& rng) {
  double boost = 1.0;
  if (alpha < 1.0) {
    boost = pow(1.0 - rng.uniform(), 1.0 / alpha);
    alpha += 1.0;
  }
  const double d = alpha - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = standard_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = 1.0 - rng.uniform();  // (0, 1]
    if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v * boost;
  }
}

// Dirichlet(alpha x n) as float32 weights that sum to 1 (a draw of all zeros, possible
// only for tiny alpha in floating point, gives equal weights).
FASTLOAD_HD void dirichlet_draw(double alpha, int n, SampleRng& rng, float* out) {
  double g[kMaxChains > 2 ? kMaxChains : 2];
  double total = 0.0;
  for (int k = 0; k < n; ++k) total += (g[k] = gamma_draw(alpha, rng));
  for (int k = 0; k < n; ++k) out[k] = static_cast<float>(total > 0.0 ? g[k] / total : 1.0 / n);
}

FASTLOAD_HD AugMixRecord augmix_draw(const AugMixSpace& space, SampleRng& rng) {
  AugMixRecord r;
  if (space.space_ops <= 0 || space.width <= 0) return r;
  r.bilinear = space.bilinear ? 1 : 0;
  const int width = space.width < kMaxChains ? space.width : kMaxChains;
  float m[2], w[kMaxChains];
  dirichlet_draw(space.alpha, 2, rng, m);
  dirichlet_draw(space.alpha, width, rng, w);
  r.original_weight = m[0];
  for (int i = 0; i < width; ++i) {
    r.chain_weight[i] = w[i] * m[1];  // float32, as torchvision's product of the two draws
    int depth = space.chain_depth > 0 ? space.chain_depth : static_cast<int>(rng.randint(1, 4));
    depth = depth < kMaxDepth ? depth : kMaxDepth;
    r.depth[i] = depth;
    for (int k = 0; k < depth; ++k) {
      const int index = static_cast<int>(rng.randint(0, space.space_ops));
      const int op = space.ops[index];
      double magnitude = 0.0;
      if (autoaugment::op_has_magnitudes(op))
        magnitude = space.magnitudes[index * space.bins + static_cast<int>(rng.randint(0, space.severity))];
      if (autoaugment::op_signed(op) && rng.randint(0, 2) != 0) magnitude = -magnitude;
      r.steps[i][k].op = op;
      r.steps[i][k].magnitude = magnitude;
    }
  }
  r.width = width;
  return r;
}

FASTLOAD_HD AugMixRecord augmix_draw(const AugMixSpace& space, int64_t seed, int64_t epoch, int64_t index) {
  SampleRng rng(seed, epoch, index, ParamStream::kAugMix);
  return augmix_draw(space, rng);
}

// ---- torchvision's tensor-path per-value math (float32, every product and sum rounded) -------

// _blend's value: (ratio * x + (1 - ratio) * degenerate).clamp(0, 255).to(uint8).
FASTLOAD_HD_INLINE uint8_t tensor_blend(float x, float degenerate, float ratio, float one_minus_ratio) {
  using color::add_rn;
  using color::mul_rn;
  float v = add_rn(mul_rn(ratio, x), mul_rn(one_minus_ratio, degenerate));
  v = v > 0.0f ? v : 0.0f;  // NaN cannot occur: finite operands
  v = v < 255.0f ? v : 255.0f;
  return static_cast<uint8_t>(v);
}

// rgb_to_grayscale of a uint8 tensor: (0.2989 R + 0.587 G + 0.114 B).to(uint8).
FASTLOAD_HD_INLINE uint8_t tensor_grey(uint8_t r, uint8_t g, uint8_t b) {
  using color::add_rn;
  using color::mul_rn;
  const float v = add_rn(add_rn(mul_rn(0.2989f, static_cast<float>(r)), mul_rn(0.587f, static_cast<float>(g))),
                         mul_rn(0.114f, static_cast<float>(b)));
  return static_cast<uint8_t>(v);
}

}  // namespace fastload::augment::augmix
