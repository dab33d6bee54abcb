// Argument checks shared by the CPU and CUDA ops of crop_resize_flip_normalize: the
// host-side ones are defined once in crop_resize_flip_normalize.cpp; the per-sample ones
// below are FASTLOAD_HD, for the CUDA kernel's device checks too.
#pragma once

#include <ATen/core/Tensor.h>

#include <climits>
#include <cstdint>

#include "augment/geometry.h"  // Interpolation
#include "check.h"
#include "host_device.h"

namespace fastload {

// The single-image op's arguments: dtype, channels, strides and size of the image, the
// box (as the float32 values the kernels get: a double such as 1e39 is finite but
// becomes inf), the output size, mean/std (one finite value per channel, std != 0), the
// output dtype and the scale. Writes mean and std as floats into mean_f/std_f (3 each).
// Raises ValueError "fastload.crop_resize_flip_normalize: expected ..., got .... <fix>".
void check_arguments(const at::Tensor& image, at::ArrayRef<double> box, at::IntArrayRef size, double scale,
                     at::ArrayRef<double> mean, at::ArrayRef<double> std, at::ScalarType dtype, float* mean_f,
                     float* std_f);

// A box of `op` (sample `index` of a batch, or -1): finite, height and width > 0.
void check_box(const char* op, float top, float left, float height, float width, int64_t index);

// The ops' int interpolation argument (Interpolation's values) as the enum; raises
// ValueError "fastload.<op>: expected interpolation 0 (bilinear), ...".
Interpolation check_interpolation(const char* op, int64_t interpolation);

// mean/std of `op`: finite, std != 0.
void check_normalize(const char* op, const float* mean, const float* std, int channels);

// Dtypes, shapes and devices of the batch op's tensors: everything that needs no look at
// the contents of shapes/boxes, so the CUDA op runs it without a device sync. flips is
// bool [N] (left-right) or [N, 2] (left-right, top-bottom). Raises
// ValueError "fastload.crop_resize_flip_normalize_batch: expected ..., got ...".
void check_batch_arguments(const at::Tensor& images, const at::Tensor& shapes, const at::Tensor& boxes,
                           const at::Tensor& flips, double scale, const at::Tensor& mean, const at::Tensor& std,
                           const at::Tensor& out);

// The batch op's per-sample colour records (uint8 [N, sizeof(ColorPass)], from
// _C.color_passes): shape, dtype, device. Their contents are checked where they are read.
void check_color(const at::Tensor& color, const at::Tensor& out);

// x - x is 0 for every finite float and NaN for inf and NaN: std::isfinite for host and
// device alike.
FASTLOAD_HD bool finite_float(float x) { return x - x == 0.0f; }

// A box [top, left, height, width] the kernel can map: finite, height and width > 0.
FASTLOAD_HD bool box_valid(float top, float left, float height, float width) {
  return finite_float(top) && finite_float(left) && finite_float(height) && finite_float(width) &&
         height > 0.0f && width > 0.0f;
}

// One row of the batch op's `shapes` (offset, height, width, row_stride): true when the
// image lies inside the `numel` bytes of `images` (checked arithmetic: a stride or
// offset near 2^63 must not wrap around and pass) and its sides and its row of bytes
// fit the kernels' int indices.
FASTLOAD_HD bool batch_image_valid(const int64_t* shape, int64_t channels, int64_t numel) {
  const int64_t offset = shape[0], height = shape[1], width = shape[2], row_stride = shape[3];
  int64_t row_bytes = 0;
  return height <= INT_MAX && width <= INT_MAX && checked_mul(width, channels, &row_bytes) &&
         row_bytes <= INT_MAX && image_inside(offset, height, width, row_stride, channels, numel);
}

// A whole sample of the batch op: its image and its box [top, left, height, width]. The
// CPU op raises on false, the CUDA kernel asserts: one definition, so both backends
// accept exactly the same inputs.
FASTLOAD_HD bool batch_sample_valid(const int64_t* shape, const float* box, int64_t channels, int64_t numel) {
  return batch_image_valid(shape, channels, numel) && box_valid(box[0], box[1], box[2], box[3]);
}

}  // namespace fastload
