// The uint8 stage of the fused CPU pass, per sample (color_stage_cpu.h), and the baseline
// build of its row loops (color_stage_cpu_impl.h; the AVX2 build: color_stage_cpu_avx2.cpp).
#include "augment/color_stage_cpu.h"

#include <cstdint>

#include "augment/augmix_cpu.h"
#include "augment/autoaugment_cpu.h"
#include "augment/blur_cpu.h"
#include "augment/color.h"

namespace fastload::augment {

void color_rows_init(ColorRows& t, const color::ColorPass& cp) {
  const color::JitterParams& jp = cp.jitter_params;
  const bool jitter = cp.jitter;
  for (int v = 0; v < 256; ++v)
    t.brightness[v] = jitter && jp.enabled[color::kBrightness]
                          ? color::pil_blend(0, static_cast<uint8_t>(v), jp.factor[color::kBrightness])
                          : static_cast<uint8_t>(v);
  t.hue_shift = jitter && jp.enabled[color::kHue] ? color::pil_hue_shift(jp.factor[color::kHue]) : 0;
}

void color_rows_contrast(ColorRows& t, const color::ColorPass& cp, int mean) {
  const float f = cp.jitter_params.factor[color::kContrast];
  for (int v = 0; v < 256; ++v)
    t.contrast[v] = color::pil_blend(static_cast<uint8_t>(mean), static_cast<uint8_t>(v), f);
  t.contrast_mean = mean;
}

const color::ColorPass* whole_image_stage(const color::ColorPass& cp, uint8_t* pixels, int out_h, int out_w,
                                          int channels, uint64_t luma_sum, color::ColorPass& rest) {
  if (!cp.whole_image()) return &cp;
  const int64_t n = static_cast<int64_t>(out_h) * out_w;
  const int mean = color::pil_contrast_mean(luma_sum, n);
  for (int64_t i = 0; i < n; ++i) color::color_second(cp, pixels + i * channels, channels, mean);
  if (cp.blur.on()) gaussian_blur_uint8(pixels, out_h, out_w, channels, cp.blur);
  auto_augment_uint8(cp.augment, pixels, out_h, out_w, channels);
  augmix_uint8(cp.augmix, pixels, out_h, out_w, channels);
  rest = cp;
  rest.jitter = false;  // done: the store's second colour step then does nothing
  rest.grayscale = false;
  return &rest;
}

}  // namespace fastload::augment

#define FASTLOAD_ISA_AVX2 0
#include "augment/color_stage_cpu_impl.h"
