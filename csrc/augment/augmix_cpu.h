// AugMix on the CPU (augmix.h's math), and the place the fused pass calls it.
//
// Stage: augment, in the uint8 stage of crop_resize_flip_normalize_cpu where torchvision's
// recipes put AugMix: after the crop, flip and colour ops, before ToTensor.
#pragma once

#include <cstdint>

#include "augment/augmix.h"

namespace fastload {

// torchvision's inverse affine matrix of one AugMix affine op on a tensor of width x
// height (F.affine / F.rotate's tensor path: centres relative to the image centre).
void tensor_affine_matrix(int op, double magnitude, int width, int height, double* matrix);

// One op of the AugMix space on a packed uint8 HWC image, in place, as torchvision's
// _apply_op on a uint8 tensor; `bilinear`: the affine ops' grid_sample mode (else nearest).
void augmix_step(uint8_t* pixels, int height, int width, int channels, int op, double magnitude, bool bilinear);

// A sample's AugMix: its chains on copies of the image, mixed with the drawn weights, in place.
void augmix_uint8(const augment::augmix::AugMixRecord& record, uint8_t* pixels, int height, int width, int channels);

}  // namespace fastload
