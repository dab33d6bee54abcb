// One sample's colour ops inside the fused pass: ColorJitter, RandomGrayscale and
// RandomErasing with their drawn parameters, and the per-pixel steps both kernels run.
//
// torchvision's order, which the fused pass keeps:
//   resize (PIL, uint8) -> ColorJitter (PIL, on the uint8 image) -> Grayscale (PIL)
//   -> ToTensor / Normalize -> RandomErasing (on the normalised tensor).
// So with jitter or grayscale the resampled value is rounded to uint8 first (Pillow's
// resize output), and contrast needs the mean of the "L" image as it is when contrast
// runs: the ops before contrast run in the resampling pass (which sums the luma), the
// rest, the grayscale and the store in a second pass over the uint8 sample.
// Erasing writes its value into the output after normalising (its value is not
// normalised, as torchvision's RandomErasing runs on the normalised tensor).
#pragma once

#include <cstdint>
#include <cstring>

#include "../host_device.h"
#include "augmix.h"
#include "autoaugment.h"
#include "blur.h"
#include "color.h"
#include "color_params.h"
#include "geometry.h"
#include "params.h"

namespace fastload::augment::color {

struct ColorPass {
  bool jitter = false;  // ColorJitter runs (in the order of jitter_params)
  JitterParams jitter_params{};
  bool grayscale = false;  // convert("L"), every channel
  EraseBox erase{0, 0, 0, 0};  // height or width 0: nothing erased
  // 0: a standard normal per element (value="random"); -1: one per channel (the
  // normals of elements 0 .. C-1); 1: erase_value[0] everywhere; else erase_value[c].
  int erase_values = 1;
  float erase_value[3] = {0.f, 0.f, 0.f};
  SampleRng erase_rng{0, 0, 0, ParamStream::kEraseValue};
  // The uint8 stage's geometric ops (blur_cpu.h runs them): RandomCrop's padding other
  // than zeros, on the resampled pixels; GaussianBlur, after the colour ops.
  PadRecord pad{};
  blur::BlurParams blur{};
  // TrivialAugmentWide / RandAugment's drawn ops, after the blur (autoaugment_cpu.h).
  autoaugment::AugmentRecord augment{};
  // AugMix's drawn chains and weights, after the blur (augmix_cpu.h).
  augmix::AugMixRecord augmix{};

  // The resampled value goes through uint8 (the PIL stage) before the value map.
  FASTLOAD_HD_INLINE bool quantized() const { return jitter || grayscale || pad.on || blur.on() || augment.on() || augmix.on(); }
  // Whole-image steps after the colour ops: the second colour pass then runs before them.
  FASTLOAD_HD_INLINE bool whole_image() const { return blur.on() || augment.on() || augmix.on(); }
  FASTLOAD_HD_INLINE bool erases() const { return erase.height > 0 && erase.width > 0; }
  FASTLOAD_HD_INLINE bool any() const { return quantized() || erases(); }
  // Position in the jitter order of contrast (4: contrast does not run): the ops before
  // it run in the first pass, contrast and the rest in the second.
  FASTLOAD_HD_INLINE int split() const { return jitter ? contrast_position(jitter_params) : 4; }
};

// The first pass's steps on one pixel already rounded to uint8: the jitter ops before
// contrast (all of them when contrast does not run); without contrast, also the grayscale.
FASTLOAD_HD void color_first(const ColorPass& cp, uint8_t* px, int channels) {
  const int split = cp.split();
  if (cp.jitter) pil_jitter(px, channels, cp.jitter_params, 0, split, 0);
  if (split == 4 && cp.grayscale) pil_grayscale(px, channels, px, channels);
}

// The second pass's steps: contrast (grey level `mean`, pil_contrast_mean of the first
// pass's luma) and the ops after it, then the grayscale. Nothing when contrast does not run.
FASTLOAD_HD void color_second(const ColorPass& cp, uint8_t* px, int channels, int mean) {
  const int split = cp.split();
  if (split == 4) return;
  pil_jitter(px, channels, cp.jitter_params, split, 4, mean);
  if (cp.grayscale) pil_grayscale(px, channels, px, channels);
}

// The erased value of output element (c, y, x), inside cp.erase.
FASTLOAD_HD float erase_value_at(const ColorPass& cp, int c, int y, int x) {
  if (cp.erase_values == 0) return erase_normal(cp.erase_rng, erase_element(cp.erase, c, y, x));
  if (cp.erase_values < 0) return erase_normal(cp.erase_rng, c);
  return cp.erase_value[cp.erase_values == 1 ? 0 : c];
}

// A record the kernels can run on an out_h x out_w sample: the erased rectangle inside
// it, a known value mode, a permutation for the jitter order. The engine's records are
// valid by construction; the batch op checks the ones it is given.
// The bytes of n bools are 0 or 1 (read as bytes: loading another value as a bool is
// undefined), as a record made from other bytes may not have them.
FASTLOAD_HD_INLINE bool bool_bytes_valid(const bool* flags, int n) {
  for (int k = 0; k < n; ++k) {
    uint8_t byte;
    memcpy(&byte, flags + k, 1);
    if (byte > 1) return false;
  }
  return true;
}

FASTLOAD_HD bool color_pass_valid(const ColorPass& cp, int out_h, int out_w) {
  if (!bool_bytes_valid(&cp.jitter, 1) || !bool_bytes_valid(&cp.grayscale, 1) ||
      !bool_bytes_valid(cp.jitter_params.enabled, 4) || !bool_bytes_valid(&cp.pad.on, 1))
    return false;
  const EraseBox& e = cp.erase;
  if (e.top < 0 || e.left < 0 || e.height < 0 || e.width < 0 || e.height > out_h - e.top ||
      e.width > out_w - e.left || cp.erase_values < -1 || cp.erase_values > 3)
    return false;
  int seen = 0;
  for (int k = 0; k < 4; ++k) {
    const int op = cp.jitter_params.order[k];
    if (op < 0 || op > 3 || (seen & (1 << op))) return false;
    seen |= 1 << op;
  }
  if (cp.pad.mode < kPadConstant || cp.pad.mode > kPadSymmetric || cp.pad.view_top < 0 || cp.pad.view_left < 0 ||
      cp.pad.image_height < 0 || cp.pad.image_width < 0)
    return false;
  if (cp.augment.count < 0 || cp.augment.count > autoaugment::kMaxSteps) return false;
  for (int k = 0; k < cp.augment.count; ++k) {
    const autoaugment::Step& step = cp.augment.steps[k];
    if (step.op < 0 || step.op >= autoaugment::kOpCount || !autoaugment::magnitude_valid(step.magnitude)) return false;
    if (step.op == autoaugment::kPosterize && !(step.magnitude >= 1 && step.magnitude < 9)) return false;
  }
  const augmix::AugMixRecord& mix = cp.augmix;
  if (mix.width < 0 || mix.width > augmix::kMaxChains) return false;
  if (mix.width > 0 && !(mix.original_weight >= 0.f && mix.original_weight <= 1.f)) return false;
  for (int k = 0; k < mix.width; ++k) {
    if (mix.depth[k] < 0 || mix.depth[k] > augmix::kMaxDepth) return false;
    if (!(mix.chain_weight[k] >= 0.f && mix.chain_weight[k] <= 1.f)) return false;  // NaN too
    for (int s = 0; s < mix.depth[k]; ++s) {
      const autoaugment::Step& step = mix.steps[k][s];
      if (step.op < 0 || step.op >= autoaugment::kOpCount || !autoaugment::magnitude_valid(step.magnitude)) return false;
      if (step.op == autoaugment::kPosterize && !(step.magnitude >= 0 && step.magnitude < 9)) return false;
    }
  }
  return !cp.blur.on() || blur::blur_fits(cp.blur, out_h, out_w);
}

// Pillow's resize output: the resampled value rounded (half up) and saturated to uint8.
FASTLOAD_HD_INLINE uint8_t resampled_to_uint8(float v) {
  v = v > 0.0f ? v : 0.0f;
  v = v < 255.0f ? v : 255.0f;
  return static_cast<uint8_t>(static_cast<int>(v + 0.5f));
}

}  // namespace fastload::augment::color
