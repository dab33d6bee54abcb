// CUDA kernels of the fused augment: crop -> antialiased resize (bilinear, bicubic or
// nearest) -> flips -> normalise -> cast -> strided store (see README.md).
//
// One thread per output pixel (all channels), grid (x, y, sample): ONE launch per batch
// over variable-size packed uint8 inputs. Each thread computes its row and column taps
// with the functions of crop_resize_flip_normalize.h (the ones the CPU kernel and its
// tests use) and sums the 2-D tap window directly: for RandomResizedCrop-sized boxes
// that is a few dozen taps, and for strong downscaling it simply loops longer. Each row
// of the window is summed first (the horizontal pass, clipped for bicubic as Pillow and
// the CPU kernel do), then weighted by its row tap. Current
// stream, device guard, launch check, no device sync: the contents of `shapes` and
// `boxes` live on the device, so the kernel checks them itself (device assert).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <cmath>
#include <type_traits>

#include "augment/color_pass.h"
#include "augment/crop_resize_flip_normalize.h"
#include "augment/crop_resize_flip_normalize_checks.h"
#include "check.h"

namespace fastload {
namespace {

using augment::Axis;
using augment::Cast;
using augment::Taps;
using augment::color::ColorPass;

// The colour ops of a batch (color_pass.h): one record per sample, and for the samples
// that go through uint8 (jitter, grayscale) their uint8 HWC pixels and the luma sums
// contrast needs, written by the resampling kernel and read by color_finish_kernel.
struct ColorBatch {
  const ColorPass* passes;  // [N], or null: no colour ops
  uint8_t* pixels;          // [N, out_h, out_w, C]
  unsigned long long* luma_sums;  // [N], zeroed

  __device__ const ColorPass* of(int64_t n) const { return passes != nullptr ? passes + n : nullptr; }
};

// Adds a thread's luma to its sample's sum, once per converged group of a warp.
__device__ void add_luma(unsigned long long* sum, unsigned luma) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned mask = __activemask();
  const unsigned total = __reduce_add_sync(mask, luma);
  if ((threadIdx.x & 31) == static_cast<unsigned>(__ffs(mask) - 1)) atomicAdd(sum, static_cast<unsigned long long>(total));
#else
  atomicAdd(sum, static_cast<unsigned long long>(luma));
#endif
}

// One sample as the kernel sees it.
struct Sample {
  const uint8_t* data;
  int height, width;
  int64_t row_stride;
  float top, left, box_height, box_width;
  bool flip, flip_v;
};

// The batch op's inputs, all on the device.
struct BatchSource {
  const uint8_t* images;
  int64_t images_numel;
  const int64_t* shapes;  // [N, 4] offset, height, width, row_stride
  const float* boxes;     // [N, 4] top, left, height, width
  const bool* flips;      // [N] (left-right) or [N, 2] (left-right, top-bottom)
  int flip_columns;       // 1 or 2
  const float* mean;      // [C]
  const float* std;       // [C]
  float scale;

  // False for a sample outside `images` or a degenerate box: the host op cannot check
  // them without a sync, so the kernel asserts (like torch's index checks).
  __device__ bool sample(int64_t n, int channels, Sample& s) const {
    const int64_t* shape = shapes + 4 * n;
    const float* box = boxes + 4 * n;
    // The CPU op's check, the same function (checked arithmetic, no wrap-around).
    if (!batch_sample_valid(shape, box, channels, images_numel)) return false;
    s = Sample{images + shape[0], static_cast<int>(shape[1]), static_cast<int>(shape[2]), shape[3], box[0], box[1],
               box[2], box[3], flips[flip_columns * n], flip_columns == 2 && flips[2 * n + 1]};
    return true;
  }
  // alpha = scale / std, beta = -mean / std: the same float operations as the CPU plan.
  __device__ float alpha(int c) const { return scale / std[c]; }
  __device__ float beta(int c) const { return -mean[c] / std[c]; }
};

// The single-image op: one sample, parameters by value.
struct SingleSource {
  Sample s;
  float alphas[3], betas[3];
  __device__ bool sample(int64_t, int, Sample& out) const {
    out = s;
    return true;
  }
  __device__ float alpha(int c) const { return alphas[c]; }
  __device__ float beta(int c) const { return betas[c]; }
};

template <typename T, int C, typename Source>
__global__ void crop_resize_flip_normalize_kernel(Source source, int64_t batch, int out_h, int out_w,
                                                  Interpolation mode, typename Cast<T>::Storage* out,
                                                  int64_t stride_n, int64_t stride_c, int64_t stride_y,
                                                  int64_t stride_x, ColorBatch color) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= out_w || y >= out_h) return;
  float alpha[C], beta[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    alpha[c] = source.alpha(c);
    beta[c] = source.beta(c);
  }
  for (int64_t n = blockIdx.z; n < batch; n += gridDim.z) {
    auto* dst = out + n * stride_n + y * stride_y + x * stride_x;
    Sample s;
    if (!source.sample(n, C, s)) {
      CUDA_KERNEL_ASSERT_MSG(false, "fastload.crop_resize_flip_normalize_batch: a sample's shapes row lies "
                                    "outside images, or its box is not finite with height, width > 0");
      continue;
    }
    const Axis ay = augment::make_axis(s.top, s.box_height, s.height, out_h, mode);
    const Axis ax = augment::make_axis(s.left, s.box_width, s.width, out_w, mode);
    const Taps ty = augment::compute_taps(ay, s.flip_v ? out_h - 1 - y : y);
    const Taps tx = augment::compute_taps(ax, s.flip ? out_w - 1 - x : x);
    const bool clip = augment::clips(mode);
    // The colour ops' PIL stage: Pillow's uint8 intermediate after the horizontal pass.
    const ColorPass* cp = color.of(n);
    // The uint8 stage's padding, blur and AutoAugment ops run on the CPU only (the loader
    // keeps such plans there); a record asking for them here would be silently wrong.
    CUDA_KERNEL_ASSERT_MSG(cp == nullptr || (!cp->pad.on && !cp->blur.on() && !cp->augment.on() && !cp->augmix.on()),
                           "fastload.crop_resize_flip_normalize_batch: RandomCrop padding modes, GaussianBlur, "
                           "TrivialAugmentWide, RandAugment and AugMix run on the CPU only; pass records without them");
    const bool pil_round = cp != nullptr && cp->quantized();
    float acc[C];
#pragma unroll
    for (int c = 0; c < C; ++c) acc[c] = 0.0f;
    // count == 0 on either axis: padding, v = 0.
    for (int ky = 0; ky < ty.count; ++ky) {
      const float wy = augment::tap_weight(ay, ty.centre, ty.first + ky) * ty.norm;
      const uint8_t* row = s.data + (ty.first + ky) * s.row_stride + static_cast<int64_t>(tx.first) * C;
      float row_acc[C];
#pragma unroll
      for (int c = 0; c < C; ++c) row_acc[c] = 0.0f;
      for (int kx = 0; kx < tx.count; ++kx) {
        const float w = augment::tap_weight(ax, tx.centre, tx.first + kx) * tx.norm;
#pragma unroll
        for (int c = 0; c < C; ++c) row_acc[c] += w * static_cast<float>(__ldg(row + kx * C + c));
      }
#pragma unroll
      for (int c = 0; c < C; ++c) {
        float h = clip ? augment::clip_pixel(row_acc[c]) : row_acc[c];
        if (pil_round) h = static_cast<float>(augment::color::resampled_to_uint8(h));
        acc[c] += wy * h;
      }
    }
    if (pil_round) {  // the PIL stage: uint8, first colour steps
      uint8_t px[C];
#pragma unroll
      for (int c = 0; c < C; ++c) px[c] = augment::color::resampled_to_uint8(clip ? augment::clip_pixel(acc[c]) : acc[c]);
      augment::color::color_first(*cp, px, C);
      uint8_t* pixel = color.pixels + ((n * out_h + y) * static_cast<int64_t>(out_w) + x) * C;
#pragma unroll
      for (int c = 0; c < C; ++c) pixel[c] = px[c];
      if (cp->split() < 4) add_luma(color.luma_sums + n, augment::color::pil_luma(px, C));
      continue;
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const float v = clip ? augment::clip_pixel(acc[c]) : acc[c];
      dst[c * stride_c] = Cast<T>::apply(v * alpha[c] + beta[c]);
    }
  }
}

// The colour ops' second step, after crop_resize_flip_normalize_kernel: contrast and the
// steps after it on the uint8 pixels, the value map and the store; then the erased
// rectangle (its values are final: torchvision erases the normalised tensor).
template <typename T, int C>
__global__ void color_finish_kernel(BatchSource source, int64_t batch, int out_h, int out_w,
                                    typename Cast<T>::Storage* out, int64_t stride_n, int64_t stride_c,
                                    int64_t stride_y, int64_t stride_x, ColorBatch color) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= out_w || y >= out_h) return;
  for (int64_t n = blockIdx.z; n < batch; n += gridDim.z) {
    const ColorPass& cp = color.passes[n];
    auto* dst = out + n * stride_n + y * stride_y + x * stride_x;
    if (cp.quantized()) {
      uint8_t px[C];
      const uint8_t* pixel = color.pixels + ((n * out_h + y) * static_cast<int64_t>(out_w) + x) * C;
#pragma unroll
      for (int c = 0; c < C; ++c) px[c] = pixel[c];
      const int mean = augment::color::pil_contrast_mean(color.luma_sums[n], static_cast<int64_t>(out_h) * out_w);
      augment::color::color_second(cp, px, C, mean);
#pragma unroll
      for (int c = 0; c < C; ++c)
        dst[c * stride_c] = Cast<T>::apply(static_cast<float>(px[c]) * source.alpha(c) + source.beta(c));
    }
    if (cp.erases() && augment::color::erase_covers(cp.erase, y, x)) {
#pragma unroll
      for (int c = 0; c < C; ++c) dst[c * stride_c] = Cast<T>::apply(augment::color::erase_value_at(cp, c, y, x));
    }
  }
}

template <typename Source>
void launch(const Source& source, int64_t batch, int channels, Interpolation mode, const at::Tensor& out,
            int64_t stride_n, int64_t stride_c, int64_t stride_y, int64_t stride_x, int out_h, int out_w,
            ColorBatch color = {nullptr, nullptr, nullptr}) {
  const dim3 block(32, 8);
  const dim3 grid((out_w + block.x - 1) / block.x, (out_h + block.y - 1) / block.y,
                  static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    using S = typename Cast<T>::Storage;
    S* data = static_cast<S*>(out.data_ptr());
    if (channels == 3)
      crop_resize_flip_normalize_kernel<T, 3><<<grid, block, 0, stream>>>(
          source, batch, out_h, out_w, mode, data, stride_n, stride_c, stride_y, stride_x, color);
    else
      crop_resize_flip_normalize_kernel<T, 1><<<grid, block, 0, stream>>>(
          source, batch, out_h, out_w, mode, data, stride_n, stride_c, stride_y, stride_x, color);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if constexpr (std::is_same_v<Source, BatchSource>) {
      if (color.passes == nullptr) return;
      if (channels == 3)
        color_finish_kernel<T, 3><<<grid, block, 0, stream>>>(source, batch, out_h, out_w, data, stride_n, stride_c,
                                                              stride_y, stride_x, color);
      else
        color_finish_kernel<T, 1><<<grid, block, 0, stream>>>(source, batch, out_h, out_w, data, stride_n, stride_c,
                                                              stride_y, stride_x, color);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  };
  switch (out.scalar_type()) {
    case at::kByte: return run(uint8_t{});
    case at::kFloat: return run(float{});
    case at::kHalf: return run(c10::Half{});
    case at::kBFloat16: return run(c10::BFloat16{});
    default: TORCH_INTERNAL_ASSERT(false, "dtype validated by the op");
  }
}

void crop_resize_flip_normalize_batch_cuda(const at::Tensor& images, const at::Tensor& shapes_in,
                                           const at::Tensor& boxes_in, const at::Tensor& flips_in, double scale,
                                           const at::Tensor& mean_in, const at::Tensor& std_in,
                                           const at::Tensor& out, int64_t interpolation,
                                           const std::optional<at::Tensor>& color_in) {
  check_batch_arguments(images, shapes_in, boxes_in, flips_in, scale, mean_in, std_in, out);
  if (color_in.has_value()) check_color(*color_in, out);
  const Interpolation mode = check_interpolation("crop_resize_flip_normalize_batch", interpolation);
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(out.device());
  // .contiguous() of a device tensor is an async copy on the current stream: no sync.
  const at::Tensor shapes = shapes_in.contiguous(), boxes = boxes_in.contiguous(), flips = flips_in.contiguous();
  const at::Tensor mean = mean_in.contiguous(), std = std_in.contiguous();
  BatchSource source{images.data_ptr<uint8_t>(), images.numel(), shapes.data_ptr<int64_t>(),
                     boxes.data_ptr<float>(), flips.data_ptr<bool>(), flips.dim() == 2 ? 2 : 1,
                     mean.data_ptr<float>(), std.data_ptr<float>(), static_cast<float>(scale)};
  // The colour records are read on the device only: their erased rectangles are tested
  // per pixel (erase_covers), so a bad record cannot write outside `out`.
  ColorBatch color{nullptr, nullptr, nullptr};
  at::Tensor pixels, luma_sums;
  if (color_in.has_value()) {
    pixels = at::empty({out.numel()}, out.options().dtype(at::kByte));
    luma_sums = at::zeros({out.size(0)}, out.options().dtype(at::kLong));
    color = ColorBatch{reinterpret_cast<const ColorPass*>(color_in->data_ptr<uint8_t>()), pixels.data_ptr<uint8_t>(),
                       reinterpret_cast<unsigned long long*>(luma_sums.data_ptr<int64_t>())};
  }
  launch(source, out.size(0), static_cast<int>(out.size(1)), mode, out, out.stride(0), out.stride(1), out.stride(2),
         out.stride(3), static_cast<int>(out.size(2)), static_cast<int>(out.size(3)), color);
}

at::Tensor crop_resize_flip_normalize_cuda(const at::Tensor& image, at::ArrayRef<double> box, at::IntArrayRef size,
                                           bool flip, double scale, at::ArrayRef<double> mean,
                                           at::ArrayRef<double> std, at::ScalarType dtype, bool channels_last,
                                           bool flip_v, int64_t interpolation) {
  // The CPU op's checks, the same function: the same arguments pass, the same messages.
  float mean_f[3], std_f[3];
  check_arguments(image, box, size, scale, mean, std, dtype, mean_f, std_f);
  const Interpolation mode = check_interpolation("crop_resize_flip_normalize", interpolation);
  const int64_t H = image.size(0), W = image.size(1), C = image.size(2);
  SingleSource source;
  for (int64_t c = 0; c < C; ++c) {
    source.alphas[c] = static_cast<float>(scale) / std_f[c];
    source.betas[c] = -mean_f[c] / std_f[c];
  }
  const int64_t OH = size[0], OW = size[1];
  const c10::cuda::CUDAGuard guard(image.device());
  at::Tensor out = channels_last ? at::empty_strided({C, OH, OW}, {1, OW * C, C}, image.options().dtype(dtype))
                                 : at::empty({C, OH, OW}, image.options().dtype(dtype));
  if (out.numel() == 0) return out;
  source.s = Sample{image.data_ptr<uint8_t>(), static_cast<int>(H), static_cast<int>(W), image.stride(0),
                    static_cast<float>(box[0]), static_cast<float>(box[1]), static_cast<float>(box[2]),
                    static_cast<float>(box[3]), flip, flip_v};
  launch(source, 1, static_cast<int>(C), mode, out, 0, out.stride(0), out.stride(1), out.stride(2), static_cast<int>(OH),
         static_cast<int>(OW));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CUDA, m) {
  m.impl("crop_resize_flip_normalize", &crop_resize_flip_normalize_cuda);
  m.impl("crop_resize_flip_normalize_batch", &crop_resize_flip_normalize_batch_cuda);
}

}  // namespace fastload
