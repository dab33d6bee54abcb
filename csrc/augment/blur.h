// GaussianBlur with torchvision's semantics, on the uint8 stage of the fused pass.
//
// torchvision's gaussian_blur on a PIL image: the uint8 image as float32, a Gaussian
// kernel of kernel_size (x, y) and one sigma for both axes (GaussianBlur draws it
// uniformly in [sigma_min, sigma_max] per call), reflect padding of kernel_size // 2,
// the convolution, then torch.round (half to even) back to uint8. Here the 2-D kernel
// (the outer product of the two 1-D ones) is applied as two 1-D passes in float32:
// the same sums but for rounding, so a value can differ by one level where the float
// result lies within rounding of a half.
//
// Per-pixel and per-row math is FASTLOAD_HD; blur_cpu.cpp runs it over an image (the
// fused pass's hook and the op fastload::gaussian_blur). Reflect padding needs
// kernel_size // 2 < the image's side on that axis, as torch's reflect pad: the plan
// fuses only such kernels, the op raises for the others.
#pragma once

#include <cmath>
#include <cstdint>

#include "../host_device.h"
#include "params.h"

namespace fastload::augment::blur {

// The largest kernel side the fused pass and the op take (a fixed-size weight table).
constexpr int kMaxKernel = 255;

// One sample's blur: kernel sizes (odd; 0: no blur) and the drawn sigma.
struct BlurParams {
  int kernel_x = 0, kernel_y = 0;
  float sigma = 0.f;
  FASTLOAD_HD bool on() const { return kernel_x > 0 && kernel_y > 0; }
};

// Whether torch's reflect padding takes the kernel on an h x w image (kernel_size // 2
// below each side) and the kernel fits the weight table: odd sides 1 .. kMaxKernel.
FASTLOAD_HD bool blur_fits(const BlurParams& b, int height, int width) {
  return b.kernel_x % 2 == 1 && b.kernel_y % 2 == 1 && b.kernel_x <= kMaxKernel && b.kernel_y <= kMaxKernel &&
         b.kernel_x / 2 < width && b.kernel_y / 2 < height && b.sigma > 0.f;
}

// torchvision's _get_gaussian_kernel1d in float32: x = linspace(-(k-1)/2, (k-1)/2, k)
// (the integers -k/2 .. k/2 for odd k), pdf = exp(-0.5 (x / sigma)^2), kernel = pdf / sum.
FASTLOAD_HD void gaussian_kernel1d(int size, float sigma, float* kernel) {
  const int half = size / 2;
  float sum = 0.f;
  for (int i = 0; i < size; ++i) {
    const float x = static_cast<float>(i - half) / sigma;
    kernel[i] = expf(-0.5f * (x * x));
    sum += kernel[i];
  }
  for (int i = 0; i < size; ++i) kernel[i] /= sum;
}

// torch's reflect padding (edge pixel not repeated): index j of an axis of `size` pixels,
// |j| reaching at most size - 1 beyond either edge.
FASTLOAD_HD int reflect_index(int j, int size) {
  if (j < 0) return -j;
  if (j >= size) return 2 * (size - 1) - j;
  return j;
}

// torch.round (half to even) and the uint8 cast of a blurred value: the weights are
// positive and sum to 1 (to rounding), so it stays within [0, 255] but for rounding.
FASTLOAD_HD uint8_t blurred_to_uint8(float v) {
  v = rintf(v);
  v = v > 0.f ? v : 0.f;
  return static_cast<uint8_t>(v < 255.f ? v : 255.f);
}

// One value of a 1-D pass: sum_k kernel[k] * src[reflect(i + k - half) * stride].
template <typename T>
FASTLOAD_HD float blur_tap_sum(const T* src, int64_t stride, int i, int size, const float* kernel, int ksize) {
  const int half = ksize / 2;
  float acc = 0.f;
  for (int k = 0; k < ksize; ++k) acc += kernel[k] * static_cast<float>(src[reflect_index(i + k - half, size) * stride]);
  return acc;
}

// GaussianBlur.get_params: sigma uniform in [sigma_min, sigma_max] (torch's uniform_ on a
// float32 tensor, so a float32 sigma), drawn on the sample's own stream. p < 1:
// RandomApply([GaussianBlur], p) first draws torch.rand(1) < p, on a stream of its own (the
// sigma draws stay a plain GaussianBlur's); NaN where the blur does not run.
FASTLOAD_HD float gaussian_blur_sigma(double sigma_min, double sigma_max, int64_t seed, int64_t epoch, int64_t index,
                                      double p = 1.0) {
  if (p < 1.0) {
    SampleRng apply(seed, epoch, index, ParamStream::kBlurApply);
    if (!(apply.uniform() < p)) return static_cast<float>(NAN);
  }
  SampleRng rng(seed, epoch, index, ParamStream::kBlur);
  return static_cast<float>(rng.uniform(sigma_min, sigma_max));
}

}  // namespace fastload::augment::blur
