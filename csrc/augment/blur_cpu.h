// The uint8 stage's geometric ops on the CPU: RandomCrop's padding other than zeros and
// GaussianBlur (blur.h), as the fused pass calls them.
//
// Stage: augment, inside crop_resize_flip_normalize_cpu's uint8 (Pillow-exact) path:
//   pil_resample -> pad_uint8_stage -> the colour steps -> gaussian_blur_uint8 -> AutoAugment -> store.
#pragma once

#include <cstdint>

#include "augment/color_pass.h"
#include "augment/crop_resize_flip_normalize_cpu.h"

namespace fastload {

// RandomCrop's padding, over the resampled uint8 sample `pixels` (out_h x out_w HWC, the
// view's channels): each output pixel whose source (box offset, flips; RandomCrop never
// resizes) lies outside the view reads cp.pad's fill or its padded_source_index pixel.
// Nothing when cp.pad is off.
void pad_uint8_stage(const augment::color::ColorPass& cp, const ImageView& in, const Box& box, const Resample& resample,
                     int out_h, int out_w, uint8_t* pixels);

// GaussianBlur of a packed uint8 HWC image in place (b.on(), blur_fits).
void gaussian_blur_uint8(uint8_t* pixels, int height, int width, int channels, const augment::blur::BlurParams& b);

}  // namespace fastload
