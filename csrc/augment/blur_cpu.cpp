// GaussianBlur and RandomCrop's padding on the uint8 stage (blur_cpu.h), and the op
// fastload::gaussian_blur (torchvision's F.gaussian_blur of a uint8 image).
#include "augment/blur_cpu.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "augment/blur.h"
#include "augment/geometry.h"
#include "check.h"

namespace fastload {

void pad_uint8_stage(const augment::color::ColorPass& cp, const ImageView& in, const Box& box, const Resample& resample,
                     int out_h, int out_w, uint8_t* pixels) {
  if (!cp.pad.on) return;
  const int C = in.channels;
  const PadRecord& pad = cp.pad;
  const int64_t image_h = pad.image_height > 0 ? pad.image_height : in.height;
  const int64_t image_w = pad.image_width > 0 ? pad.image_width : in.width;
  // RandomCrop's box: whole pixels, the output's size (scale 1), here in image coordinates.
  const int64_t top = std::lround(box.top) + pad.view_top, left = std::lround(box.left) + pad.view_left;
  // The pixel a padded position reads, in the view. It is inside the view whenever the
  // engine decoded the window (sample.cpp's decode_window); the clamp only keeps any other
  // case inside the buffer.
  const auto source = [&](int64_t j, int64_t size, int64_t view_origin, int view_size) {
    return static_cast<int>(std::clamp<int64_t>(padded_source_index(j, size, pad.mode) - view_origin, 0,
                                                view_size - 1));
  };
  for (int y = 0; y < out_h; ++y) {
    const int64_t sy = top + (resample.flip_v ? out_h - 1 - y : y);
    const bool row_inside = sy >= 0 && sy < image_h;
    const uint8_t* src_row = in.data + static_cast<int64_t>(source(sy, image_h, pad.view_top, in.height)) * in.row_stride;
    uint8_t* dst = pixels + static_cast<size_t>(y) * out_w * C;
    for (int x = 0; x < out_w; ++x) {
      const int64_t sx = left + (resample.flip ? out_w - 1 - x : x);
      if (row_inside && sx >= 0 && sx < image_w) continue;  // an image pixel: the kernel copied it
      for (int c = 0; c < C; ++c) {
        dst[x * C + c] = pad.mode == kPadConstant
                             ? pad.fill[c]
                             : src_row[static_cast<int64_t>(source(sx, image_w, pad.view_left, in.width)) * C + c];
      }
    }
  }
}

void gaussian_blur_uint8(uint8_t* pixels, int height, int width, int channels, const augment::blur::BlurParams& b) {
  float kx[augment::blur::kMaxKernel], ky[augment::blur::kMaxKernel];
  augment::blur::gaussian_kernel1d(b.kernel_x, b.sigma, kx);
  augment::blur::gaussian_kernel1d(b.kernel_y, b.sigma, ky);
  const int64_t row = static_cast<int64_t>(width) * channels;
  const int half_x = b.kernel_x / 2, half_y = b.kernel_y / 2;
  // The passes as blur_tap_sum computes each value (taps in order, float), but tap after
  // tap over a whole row, so that the loops vectorise: the same sums, the same values.
  // The horizontal pass stays in float (no rounding between the passes: one 2-D convolution).
  thread_local std::vector<float> horizontal, padded, acc;
  horizontal.resize(static_cast<size_t>(height) * row);
  padded.resize(static_cast<size_t>(width + 2 * half_x) * channels);
  acc.resize(static_cast<size_t>(row));
  for (int y = 0; y < height; ++y) {
    const uint8_t* src = pixels + y * row;
    for (int x = -half_x; x < width + half_x; ++x)  // the row with torch's reflect padding
      for (int c = 0; c < channels; ++c)
        padded[static_cast<size_t>(x + half_x) * channels + c] =
            static_cast<float>(src[static_cast<int64_t>(augment::blur::reflect_index(x, width)) * channels + c]);
    float* __restrict dst = horizontal.data() + y * row;
    for (int64_t i = 0; i < row; ++i) dst[i] = 0.f;
    for (int k = 0; k < b.kernel_x; ++k) {
      const float w = kx[k];
      const float* __restrict tap = padded.data() + static_cast<int64_t>(k) * channels;
      for (int64_t i = 0; i < row; ++i) dst[i] += w * tap[i];
    }
  }
  float* __restrict sums = acc.data();
  for (int y = 0; y < height; ++y) {
    for (int64_t i = 0; i < row; ++i) sums[i] = 0.f;
    for (int k = 0; k < b.kernel_y; ++k) {
      const float w = ky[k];
      const float* __restrict tap = horizontal.data() + augment::blur::reflect_index(y + k - half_y, height) * row;
      for (int64_t i = 0; i < row; ++i) sums[i] += w * tap[i];
    }
    uint8_t* dst = pixels + y * row;
    for (int64_t i = 0; i < row; ++i) dst[i] = augment::blur::blurred_to_uint8(sums[i]);
  }
}

namespace {

constexpr const char* kOp = "gaussian_blur";

// torchvision's F.gaussian_blur(img, kernel_size=[kx, ky], sigma=[sigma, sigma]) of a
// uint8 HWC image (what pil_to_tensor gives, channels last).
at::Tensor gaussian_blur_op(const at::Tensor& image, at::IntArrayRef kernel_size, double sigma) {
  FASTLOAD_CHECK_VALUE(image.dim() == 3 && image.scalar_type() == at::kByte && image.device().is_cpu(), kOp,
                       "expected a uint8 HWC image on the CPU, got ", image.scalar_type(), " of shape ", image.sizes(),
                       " on ", image.device(), ".");
  FASTLOAD_CHECK_VALUE(kernel_size.size() == 2, kOp, "expected kernel_size as [kx, ky], got ", kernel_size, ".");
  for (const int64_t k : kernel_size) {
    FASTLOAD_CHECK_VALUE(k > 0 && k % 2 == 1 && k <= augment::blur::kMaxKernel, kOp,
                         "kernel_size should have odd and positive integers (at most ", augment::blur::kMaxKernel,
                         "). Got ", kernel_size, ".");
  }
  FASTLOAD_CHECK_VALUE(std::isfinite(sigma) && sigma > 0, kOp, "sigma should have positive values. Got ", sigma, ".");
  const int64_t H = image.size(0), W = image.size(1), C = image.size(2);
  FASTLOAD_CHECK_VALUE(H > 0 && W > 0 && C > 0 && H <= INT32_MAX && W * C <= INT32_MAX, kOp,
                       "expected a non-empty image with rows under 2^31 bytes, got shape ", image.sizes(), ".");
  // torch's reflect padding (torchvision pads by kernel_size // 2) refuses a padding of
  // the side or more: the same condition, in its words.
  FASTLOAD_CHECK(kernel_size[0] / 2 < W && kernel_size[1] / 2 < H, kOp,
                 "Padding size should be less than the corresponding input dimension, but got: padding (",
                 kernel_size[0] / 2, ", ", kernel_size[0] / 2, ") and (", kernel_size[1] / 2, ", ",
                 kernel_size[1] / 2, ") for an image of ", H, "x", W, " (kernel_size ", kernel_size,
                 "). Use a kernel_size below twice the image's sides");
  at::Tensor out = image.contiguous().clone();
  augment::blur::BlurParams b;
  b.kernel_x = static_cast<int>(kernel_size[0]);
  b.kernel_y = static_cast<int>(kernel_size[1]);
  b.sigma = static_cast<float>(sigma);
  gaussian_blur_uint8(out.data_ptr<uint8_t>(), static_cast<int>(H), static_cast<int>(W), static_cast<int>(C), b);
  return out;
}

// GaussianBlur.get_params of samples `indices`: float32 [N] sigmas; p: the probability
// that the blur runs (RandomApply), NaN where it does not.
at::Tensor gaussian_blur_params_op(const at::Tensor& indices, int64_t seed, int64_t epoch, double sigma_min,
                                   double sigma_max, double p) {
  FASTLOAD_CHECK_VALUE(indices.dim() == 1 && indices.scalar_type() == at::kLong, "gaussian_blur_params",
                       "expected int64 sample indices [N], got ", indices.scalar_type(), " of shape ", indices.sizes(),
                       ".");
  FASTLOAD_CHECK_VALUE(std::isfinite(sigma_min) && std::isfinite(sigma_max) && 0 < sigma_min && sigma_min <= sigma_max,
                       "gaussian_blur_params", "sigma values should be positive and of the form (min, max). Got (",
                       sigma_min, ", ", sigma_max, ").");
  FASTLOAD_CHECK_VALUE(std::isfinite(p) && p >= 0 && p <= 1, "gaussian_blur_params", "expected p in [0, 1], got ", p,
                       ".");
  const at::Tensor idx = indices.contiguous();
  at::Tensor out = at::empty({idx.size(0)}, idx.options().dtype(at::kFloat));
  const int64_t* in = idx.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < idx.size(0); ++i)
    o[i] = augment::blur::gaussian_blur_sigma(sigma_min, sigma_max, seed, epoch, in[i], p);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) {
  m.impl("gaussian_blur", &gaussian_blur_op);
  m.impl("gaussian_blur_params", &gaussian_blur_params_op);
}

}  // namespace fastload
