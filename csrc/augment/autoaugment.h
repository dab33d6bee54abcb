// TrivialAugmentWide, RandAugment and AutoAugment on the uint8 (PIL) image: the ops of
// torchvision's augmentation space with Pillow's arithmetic, and their random draws from
// (seed, epoch, index).
//
// torchvision runs these transforms on the PIL image an ImageFolder pipeline holds after
// its crop and flip, so every op here follows Pillow's C code on uint8 pixels:
//   ShearX/Y, TranslateX/Y, Rotate  Image.transform(AFFINE) with torchvision's inverse
//                                   matrix; NEAREST: Geometry.c's scale, 16.16 fixed
//                                   point and float paths, picked as Pillow picks them;
//                                   BILINEAR: its generic transform and bilinear filter;
//                                   Image.rotate's transposes for 90/180/270 degrees;
//   Brightness, Color, Contrast     ImageEnhance (color.h's blends);
//   Sharpness                       ImageEnhance.Sharpness: the SMOOTH 3x3 filter
//                                   (Filter.c, float), then the blend;
//   Posterize, Solarize, Invert     ImageOps' lookup tables;
//   AutoContrast, Equalize          ImageOps' per-channel histogram tables.
// The per-pixel and per-table math is FASTLOAD_HD; the affine matrix (Python's float
// arithmetic, libm's trigonometry) is computed on the host per sample
// (autoaugment_cpu.cpp).
//
// Draws, torchvision's in distribution with SampleRng in place of torch's generator
// (ParamStream::kAutoAugment): TrivialAugmentWide picks one op uniformly, then one of
// its magnitude bins uniformly (ops without magnitudes draw none), then the sign of a
// signed op with probability 1/2; RandAugment picks num_ops ops uniformly (with
// repeats), each at the fixed bin `magnitude`, each with its sign draw; AutoAugment picks
// one sub-policy of its table uniformly, then draws two uniforms in [0, 1) and two signs
// (torchvision's get_params: policy_id, probs, signs, in that order) and runs the
// sub-policy's i-th op when probs[i] <= its probability, at its bin (None: magnitude 0),
// negated when the op is signed and signs[i] == 0. torchvision.transforms.v2 draws the
// same quantities lazily (a uniform per op, a sign only for an applied op with
// magnitudes): the same distribution, so one draw serves both.
#pragma once

#include <cmath>
#include <cstdint>

#include "../host_device.h"
#include "color.h"
#include "params.h"

namespace fastload::augment::autoaugment {

// The ops, numbered for the plan's op tables, by torchvision's names: the one list (Python
// reads the names, in id order, as fastload._C.AUGMENT_OPS).
#define FASTLOAD_AUGMENT_OPS(X)                                                                          \
  X(Identity) X(ShearX) X(ShearY) X(TranslateX) X(TranslateY) X(Rotate) X(Brightness) X(Color) X(Contrast) \
  X(Sharpness) X(Posterize) X(Solarize) X(AutoContrast) X(Equalize) X(Invert)

enum AugmentOp : int32_t {
#define FASTLOAD_AUGMENT_OP_ID(name) k##name,
  FASTLOAD_AUGMENT_OPS(FASTLOAD_AUGMENT_OP_ID)
#undef FASTLOAD_AUGMENT_OP_ID
  kOpCount,
};

// The most ops one sample runs (RandAugment's num_ops): the record is fixed-size.
constexpr int kMaxSteps = 8;

// The ops of one AutoAugment sub-policy.
constexpr int kPolicySteps = 2;

// torchvision's "signed" flag of each op: its magnitude is negated with probability 1/2.
FASTLOAD_HD bool op_signed(int op) { return op >= kShearX && op <= kSharpness; }

// Ops whose magnitude table is a 0-d tensor in torchvision: no bin is drawn for them.
FASTLOAD_HD bool op_has_magnitudes(int op) { return op >= kShearX && op <= kSolarize; }

FASTLOAD_HD bool op_is_affine(int op) { return op >= kShearX && op <= kRotate; }

// The magnitudes the ops take: finite and within +-kMaxMagnitude (torchvision's tables
// stay within 255; a translation of more keeps every coordinate far inside int).
constexpr double kMaxMagnitude = 10000.0;
FASTLOAD_HD bool magnitude_valid(double m) { return m >= -kMaxMagnitude && m <= kMaxMagnitude; }

struct Step {
  int32_t op;
  int32_t slot;      // its place among the sample's draws: the k-th op, or the sub-policy's k-th
  double magnitude;  // signed as drawn: the value torchvision's _apply_op receives
};

// One sample's drawn ops. fill: the affine ops' fill colour per channel (torchvision's
// fill, None = 0); bilinear: their filter Pillow's BILINEAR (else NEAREST); drawn: the
// plan augments, so the sample goes through the uint8 (PIL) image even when it draws no
// op (an AutoAugment sub-policy whose ops both fail their probability).
struct AugmentRecord {
  int32_t count = 0;
  uint8_t fill[3] = {0, 0, 0};
  uint8_t bilinear = 0;
  uint8_t drawn = 0;
  Step steps[kMaxSteps] = {};

  FASTLOAD_HD_INLINE bool on() const { return drawn != 0 || count > 0; }
};

// The augmentation space a plan holds: `space_ops` op ids in torchvision's order and
// `magnitudes` [space_ops x bins] (zeros for ops without magnitudes). With `policies` > 0
// it is AutoAugment's: a table of sub-policies, each kPolicySteps (op, probability, bin)
// rows: policy_ops indexes into ops, policy_bins into the op's bins (-1: torchvision's
// None, magnitude 0), all three [policies x kPolicySteps]; num_ops and magnitude_bin are
// then unused.
struct AugmentSpace {
  const int32_t* ops;
  const double* magnitudes;
  int space_ops;
  int bins;
  int num_ops;        // ops per sample: 1 (TrivialAugmentWide) or RandAugment's num_ops
  int magnitude_bin;  // -1: drawn per op (TrivialAugmentWide); else RandAugment's magnitude
  bool bilinear = false;  // the affine ops' filter
  int policies = 0;
  const int32_t* policy_ops = nullptr;
  const double* policy_probs = nullptr;
  const int32_t* policy_bins = nullptr;
};

// AutoAugment's draw: the applied ops of one uniformly drawn sub-policy, in order, each
// Step's slot its place in the sub-policy (an op not applied leaves no step).
FASTLOAD_HD void auto_augment_policy_draw(const AugmentSpace& space, SampleRng& rng, AugmentRecord& record) {
  const int policy = static_cast<int>(rng.randint(0, space.policies));
  double probs[kPolicySteps];
  int64_t signs[kPolicySteps];
  for (int i = 0; i < kPolicySteps; ++i) probs[i] = rng.uniform();
  for (int i = 0; i < kPolicySteps; ++i) signs[i] = rng.randint(0, 2);
  int n = 0;
  for (int i = 0; i < kPolicySteps; ++i) {
    const int row = policy * kPolicySteps + i;
    if (!(probs[i] <= space.policy_probs[row])) continue;
    const int index = space.policy_ops[row];
    const int op = space.ops[index];
    const int bin = space.policy_bins[row];
    double magnitude = bin >= 0 ? space.magnitudes[index * space.bins + bin] : 0.0;
    if (op_signed(op) && signs[i] == 0) magnitude = -magnitude;
    record.steps[n].op = op;
    record.steps[n].slot = i;
    record.steps[n].magnitude = magnitude;
    ++n;
  }
  record.count = n;
}

FASTLOAD_HD AugmentRecord auto_augment_draw(const AugmentSpace& space, const uint8_t* fill, SampleRng& rng) {
  AugmentRecord record;
  record.bilinear = space.bilinear ? 1 : 0;
  for (int c = 0; c < 3; ++c) record.fill[c] = fill[c];
  if (space.space_ops <= 0 || space.bins <= 0) return record;
  record.drawn = 1;
  if (space.policies > 0) {
    auto_augment_policy_draw(space, rng, record);
    return record;
  }
  const int n = space.num_ops < kMaxSteps ? space.num_ops : kMaxSteps;
  for (int k = 0; k < n; ++k) {
    const int index = static_cast<int>(rng.randint(0, space.space_ops));
    const int op = space.ops[index];
    double magnitude = 0.0;
    if (op_has_magnitudes(op)) {
      const int bin = space.magnitude_bin >= 0 ? space.magnitude_bin : static_cast<int>(rng.randint(0, space.bins));
      magnitude = space.magnitudes[index * space.bins + bin];
    }
    if (op_signed(op) && rng.randint(0, 2) != 0) magnitude = -magnitude;
    record.steps[k].op = op;
    record.steps[k].slot = k;
    record.steps[k].magnitude = magnitude;
  }
  record.count = n;
  return record;
}

FASTLOAD_HD AugmentRecord auto_augment_draw(const AugmentSpace& space, const uint8_t* fill, int64_t seed,
                                            int64_t epoch, int64_t index) {
  SampleRng rng(seed, epoch, index, ParamStream::kAutoAugment);
  return auto_augment_draw(space, fill, rng);
}

// ---- lookup-table ops (ImageOps) ----------------------------------------------------------

// ImageOps.posterize: keep the top `bits` bits (1 <= bits <= 8).
FASTLOAD_HD_INLINE uint8_t posterize(uint8_t v, int bits) {
  return static_cast<uint8_t>(v & ~((1 << (8 - bits)) - 1));
}

// ImageOps.solarize: invert the values at or above `threshold`.
FASTLOAD_HD_INLINE uint8_t solarize(uint8_t v, double threshold) {
  return static_cast<double>(v) < threshold ? v : static_cast<uint8_t>(255 - v);
}

// ImageOps.autocontrast (cutoff 0) of one channel's histogram: its lowest and highest
// values stretched to 0 and 255, as Python floats (int(ix * scale + offset), clamped).
FASTLOAD_HD void autocontrast_table(const uint32_t* histogram, uint8_t* table) {
  int lo = 0, hi = 255;
  while (lo < 256 && histogram[lo] == 0) ++lo;
  while (hi >= 0 && histogram[hi] == 0) --hi;
  if (hi <= lo) {  // one value (or none): Pillow leaves the channel
    for (int v = 0; v < 256; ++v) table[v] = static_cast<uint8_t>(v);
    return;
  }
  const double scale = 255.0 / static_cast<double>(hi - lo);
  const double offset = color::dmul_rn(-static_cast<double>(lo), scale);
  for (int v = 0; v < 256; ++v) {
    const double t = color::dmul_rn(static_cast<double>(v), scale) + offset;
    const int level = static_cast<int>(t);  // Python's int(): towards zero
    table[v] = static_cast<uint8_t>(level < 0 ? 0 : (level > 255 ? 255 : level));
  }
}

// ImageOps.equalize of one channel's histogram (integer arithmetic, Pillow 13's step of
// (count - count of the last used value) // 255; point() clips the table to 255).
FASTLOAD_HD void equalize_table(const uint32_t* histogram, uint8_t* table) {
  uint64_t total = 0, last = 0;
  int used = 0;
  for (int v = 0; v < 256; ++v) {
    if (histogram[v] == 0) continue;
    total += histogram[v];
    last = histogram[v];
    ++used;
  }
  const uint64_t step = used <= 1 ? 0 : (total - last) / 255;
  if (step == 0) {
    for (int v = 0; v < 256; ++v) table[v] = static_cast<uint8_t>(v);
    return;
  }
  uint64_t n = step / 2;
  for (int v = 0; v < 256; ++v) {
    const uint64_t level = n / step;
    table[v] = static_cast<uint8_t>(level > 255 ? 255 : level);
    n += histogram[v];
  }
}

// ---- Sharpness (ImageFilter.SMOOTH, Filter.c's 3x3 float kernel) ---------------------------

// The SMOOTH kernel's weights as Pillow holds them: float(k) / float(13).
FASTLOAD_HD_INLINE float smooth_edge_weight() { return 1.0f / 13.0f; }
FASTLOAD_HD_INLINE float smooth_centre_weight() { return 5.0f / 13.0f; }

// One filtered value: Pillow's 0.5 + row below + row + row above, each row
// (left * k0 + centre * k1) + right * k2, every product and sum rounded to float.
FASTLOAD_HD_INLINE uint8_t smooth_value(const uint8_t* above, const uint8_t* row, const uint8_t* below, int x, int step) {
  const float e = smooth_edge_weight(), m = smooth_centre_weight();
  using color::add_rn;
  using color::mul_rn;
  auto line = [&](const uint8_t* r, float centre) {
    return add_rn(add_rn(mul_rn(static_cast<float>(r[x - step]), e), mul_rn(static_cast<float>(r[x]), centre)),
                  mul_rn(static_cast<float>(r[x + step]), e));
  };
  float s = 0.5f;
  s = add_rn(s, line(below, e));
  s = add_rn(s, line(row, m));
  s = add_rn(s, line(above, e));
  s = s < 0.0f ? 0.0f : s;
  s = s > 255.0f ? 255.0f : s;
  return static_cast<uint8_t>(s);
}

// ---- affine ops (Image.transform AFFINE, NEAREST) ------------------------------------------

// Pillow's COORD: -1 left of the image, else truncated.
FASTLOAD_HD_INLINE int pil_coord(double v) { return v < 0.0 ? -1 : static_cast<int>(v); }

// Pillow's FIX: 16.16 fixed point, FLOOR(v * 65536 + 0.5).
FASTLOAD_HD_INLINE int64_t pil_fix(double v) {
  const double t = v * 65536.0 + 0.5;
  return t < 0.0 ? static_cast<int64_t>(floor(t)) : static_cast<int64_t>(t);
}

// Which of Geometry.c's nearest-neighbour paths Pillow takes for matrix `a` on a
// width x height output: the scale path when a[1] == a[3] == 0, else 16.16 fixed point
// when the four corners map inside +-32768, else doubles.
enum class AffinePath : int32_t { kScale = 0, kFixed = 1, kFloat = 2 };

FASTLOAD_HD bool pil_check_fixed(const double* a, int x, int y) {
  using color::dmul_rn;
  return fabs(dmul_rn(x, a[0]) + dmul_rn(y, a[1]) + a[2]) < 32768.0 &&
         fabs(dmul_rn(x, a[3]) + dmul_rn(y, a[4]) + a[5]) < 32768.0;
}

FASTLOAD_HD AffinePath affine_path(const double* a, int width, int height) {
  if (a[1] == 0.0 && a[3] == 0.0) return AffinePath::kScale;
  if (pil_check_fixed(a, 0, 0) && pil_check_fixed(a, width, height) && pil_check_fixed(a, 0, height) &&
      pil_check_fixed(a, width, 0))
    return AffinePath::kFixed;
  return AffinePath::kFloat;
}

}  // namespace fastload::augment::autoaugment
