// Argument checks shared by the CPU and CUDA batch ops of crop_resize_flip_normalize
// (defined in crop_resize_flip_normalize_cpu.cpp).
#pragma once

#include <ATen/core/Tensor.h>

namespace fastload {

// Dtypes, shapes and devices of the batch op's tensors: everything that needs no look at
// the contents of shapes/boxes, so the CUDA op runs it without a device sync. Raises
// ValueError "fastload.crop_resize_flip_normalize_batch: expected ..., got ...".
void check_batch_arguments(const at::Tensor& images, const at::Tensor& shapes, const at::Tensor& boxes,
                           const at::Tensor& flips, double scale, const at::Tensor& mean, const at::Tensor& std,
                           const at::Tensor& out);

}  // namespace fastload
