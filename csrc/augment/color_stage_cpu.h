// The uint8 stage of the fused CPU pass (torchvision's PIL stage) around the resample:
// the colour ops over the sample's uint8 rows (first pass: the jitter ops before
// contrast and the luma sum; second pass: contrast and the rest, the grayscale), and the
// whole-image steps between the passes (GaussianBlur, AutoAugment, AugMix). The per-sample
// parts are here (baseline ISA); the row loops in color_stage_cpu_impl.h, one build per
// instruction set (baseline::, avx2::), called by the float resample's build of the same
// instruction set (resample_float_cpu_impl.h).
#pragma once

#include <cstdint>

#include "augment/color_pass.h"

namespace fastload::augment {

struct RowPlan;  // resample_float_cpu.h

// One sample's colour ops over its uint8 rows. Brightness and contrast blend every value
// with one grey per sample, so a 256-entry table of Pillow's blend (color.h, the same
// function) stands in for the float math in the baseline build (the AVX2 build blends 16
// values a step, faster than the lookups); contrast's is made once its mean is known,
// after the first pass.
struct ColorRows {
  uint8_t brightness[256];
  uint8_t contrast[256];
  int contrast_mean;
  uint8_t hue_shift;
};

// The brightness table and the hue shift of cp.
void color_rows_init(ColorRows& t, const color::ColorPass& cp);
// The contrast table of cp around grey level `mean`.
void color_rows_contrast(ColorRows& t, const color::ColorPass& cp, int mean);

// The uint8 stage's whole-image steps (GaussianBlur, blur_cpu.h; then TrivialAugmentWide /
// RandAugment, autoaugment_cpu.h, or AugMix, augmix_cpu.h) after the first colour steps:
// contrast's pass and the colour steps after it run first, so that they see the colour
// ops' result. Returns the record the store then runs: `rest`, cp without the colour
// steps already done, or &cp when cp has no whole-image step.
const color::ColorPass* whole_image_stage(const color::ColorPass& cp, uint8_t* pixels, int out_h, int out_w,
                                          int channels, uint64_t luma_sum, color::ColorPass& rest);

// Row y of plan.pixels through the colour steps, per instruction set:
//   color_first_row: rounds the resampled row plan.hrow into it first (nearest, whose
//     float resample is Pillow's), then as color_first_pixels;
//   color_first_pixels: the jitter ops before contrast (all of them, and the grayscale,
//     when contrast does not run), and adds its luma to plan.luma_sum;
//   color_second_row: contrast and the steps after it, then the row as floats into
//     plan.hrow (RGBx or gray) for the value map and store.
namespace baseline {
void color_first_row(RowPlan& plan, int y);
void color_first_pixels(RowPlan& plan, int y);
void color_second_row(RowPlan& plan, int y);
}  // namespace baseline
namespace avx2 {
void color_first_row(RowPlan& plan, int y);
void color_first_pixels(RowPlan& plan, int y);
void color_second_row(RowPlan& plan, int y);
}  // namespace avx2

}  // namespace fastload::augment
