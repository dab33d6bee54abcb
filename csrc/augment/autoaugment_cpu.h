// TrivialAugmentWide / RandAugment ops on the CPU (autoaugment.h's math), and the place
// the fused pass calls them.
//
// Stage: augment, the last op of crop_resize_flip_normalize_cpu's uint8 (Pillow-exact)
// stage: pil_resample -> padding -> colour ops -> blur -> these -> store.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "augment/autoaugment.h"

namespace fastload {

// CPython's math.radians / math.degrees factors.
constexpr double kPi = 3.14159265358979323846;
constexpr double kDegToRad = kPi / 180.0;
constexpr double kRadToDeg = 180.0 / kPi;

// torchvision.transforms.functional._get_inverse_affine_matrix (scale 1), term by term in
// Python's float arithmetic: centre (cx, cy), angle and shears in degrees, translation.
void inverse_affine_matrix(double cx, double cy, double angle, double tx, double ty, double shear_x, double shear_y,
                           double* matrix);

// What Pillow runs for one affine op on a width x height image: a transpose (Image.rotate's
// shortcut for multiples of 90 degrees) or Image.transform with `matrix`, torchvision's
// inverse affine matrix in Python's float arithmetic.
struct AffineOp {
  enum Kind : int { kMatrix = 0, kCopy = 1, kRotate90 = 2, kRotate180 = 3, kRotate270 = 4 } kind = kMatrix;
  double matrix[6] = {1, 0, 0, 0, 1, 0};
};

AffineOp affine_op(int op, double magnitude, int width, int height);

// One op of torchvision's augmentation space with its (signed) magnitude on a packed
// uint8 HWC image, in place, as torchvision's _apply_op on a PIL image. `fill`: the
// affine ops' fill, one value per channel; `bilinear`: their filter BILINEAR, else NEAREST.
void auto_augment_step(uint8_t* pixels, int height, int width, int channels, int op, double magnitude,
                       const uint8_t* fill, bool bilinear);

// A sample's drawn ops in order (nothing when the record is off).
void auto_augment_uint8(const augment::autoaugment::AugmentRecord& record, uint8_t* pixels, int height, int width,
                        int channels);

// The ops' argument checks, shared with augmix_cpu.cpp's (ValueError "fastload.<op>: ..."):
// op ids of AugmentOp; a non-empty uint8 HWC image [H, W, 1 or 3] on the CPU; int64 sample
// indices [N] and an augmentation space (op ids, magnitudes [ops x bins]): its bins.
void check_op_ids(const char* op, at::IntArrayRef ops);
void check_augment_image(const char* op, const at::Tensor& image);
int64_t check_augment_space(const char* op, const at::Tensor& indices, at::IntArrayRef space_ops,
                            at::ArrayRef<double> magnitudes);

}  // namespace fastload
