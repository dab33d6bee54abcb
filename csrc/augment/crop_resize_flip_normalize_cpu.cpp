// The fused augment's CPU entry (crop -> antialiased resize -> flips -> normalise -> cast
// -> strided store, one sample per call; README.md), the choice of the loops' build for
// this CPU, and the two ops on CPU.
//
// The work is in the kernel files: the float resample (resample_float_cpu.h), Pillow's
// 8-bit resample for the colour ops' PIL stage (resample_pil_cpu.h), the colour and
// whole-image steps (color_stage_cpu.h); their row loops are compiled once for baseline
// x86-64 and once for AVX2 + FMA (simd_cpu.h), and this file picks one set per process.
#include "augment/crop_resize_flip_normalize_cpu.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdlib>

#include "augment/blur_cpu.h"
#include "augment/crop_resize_flip_normalize_checks.h"
#include "augment/resample_float_cpu.h"
#include "augment/resample_pil_cpu.h"
#include "augment/simd_cpu.h"
#include "check.h"

namespace fastload {
namespace {

// The entry points of one build of the loops.
struct CpuKernels {
  const char* name;  // build_info()["augment_cpu_path"]
  void (*resample_float)(augment::RowPlan&, const ImageView&, const OutputView&);
  augment::PilRun resample_pil;
};

// The AVX2 build where the CPU has AVX2 and FMA, unless FASTLOAD_NO_AVX2=1 (tests and
// benchmarks of the baseline path); chosen once per process.
const CpuKernels& cpu_kernels() {
  static const CpuKernels kernels = [] {
#if defined(FASTLOAD_HAVE_AVX2_PATH)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && std::getenv("FASTLOAD_NO_AVX2") == nullptr)
      return CpuKernels{"avx2", &augment::avx2::resample_float, &augment::avx2::pil_run};
#endif
    return CpuKernels{"baseline", &augment::baseline::resample_float, &augment::baseline::pil_run};
  }();
  return kernels;
}

}  // namespace

const char* crop_resize_flip_normalize_cpu_path() { return cpu_kernels().name; }

void crop_resize_flip_normalize_cpu(const ImageView& in, const Box& box, const Resample& resample, float scale,
                                    const float* mean, const float* std, const OutputView& out,
                                    ResizeScratch& scratch, const augment::color::ColorPass* color) {
  if (out.height <= 0 || out.width <= 0) return;
  const CpuKernels& kernels = cpu_kernels();
  augment::RowPlan plan;
  const bool quantized = color != nullptr && color->quantized();
  augment::build_row_plan(in, box, resample, scale, mean, std, out, scratch, plan, quantized);
  plan.color = color;
  plan.luma_sum = 0;
  plan.pixels = nullptr;
  plan.pixels_ready = false;
  if (quantized) {
    scratch.color_pixels.resize(static_cast<size_t>(out.height) * out.width * in.channels);
    plan.pixels = scratch.color_pixels.data();
    if (resample.interpolation != Interpolation::kNearest) {  // nearest: the float path is Pillow's already
      augment::pil_resample(in, box, resample, out.height, out.width, plan.pixels, kernels.resample_pil);
      pad_uint8_stage(*color, in, box, resample, out.height, out.width, plan.pixels);  // RandomCrop's padding
      plan.pixels_ready = true;
    }
  }
  kernels.resample_float(plan, in, out);
}

// ---- the ops (their argument checks: crop_resize_flip_normalize.cpp) ------------------------

namespace {

constexpr const char* kBatchOp = "crop_resize_flip_normalize_batch";

at::Tensor crop_resize_flip_normalize_op(const at::Tensor& image, at::ArrayRef<double> box,
                                         at::IntArrayRef size, bool flip, double scale,
                                         at::ArrayRef<double> mean, at::ArrayRef<double> std,
                                         at::ScalarType dtype, bool channels_last, bool flip_v,
                                         int64_t interpolation) {
  float mean_f[3], std_f[3];
  check_arguments(image, box, size, scale, mean, std, dtype, mean_f, std_f);
  const Resample resample{flip, flip_v, check_interpolation("crop_resize_flip_normalize", interpolation)};
  const int64_t H = image.size(0), W = image.size(1), C = image.size(2);

  const int64_t OH = size[0], OW = size[1];
  // channels_last for [C, H, W]: HWC memory, i.e. strides (1, W*C, C).
  at::Tensor out = channels_last
                       ? at::empty_strided({C, OH, OW}, {1, OW * C, C}, image.options().dtype(dtype))
                       : at::empty({C, OH, OW}, image.options().dtype(dtype));
  if (out.numel() == 0) return out;
  ImageView in{image.data_ptr<uint8_t>(), static_cast<int>(H), static_cast<int>(W), static_cast<int>(C),
               image.stride(0)};
  OutputView view{out.data_ptr(), dtype, static_cast<int>(C), static_cast<int>(OH), static_cast<int>(OW),
                  out.stride(0), out.stride(1), out.stride(2)};
  ResizeScratch scratch;
  crop_resize_flip_normalize_cpu(in, Box{float(box[0]), float(box[1]), float(box[2]), float(box[3])}, resample,
                                 static_cast<float>(scale), mean_f, std_f, view, scratch);
  return out;
}

}  // namespace

namespace {

void crop_resize_flip_normalize_batch_op(const at::Tensor& images, const at::Tensor& shapes_in,
                                         const at::Tensor& boxes_in, const at::Tensor& flips_in, double scale,
                                         const at::Tensor& mean_in, const at::Tensor& std_in,
                                         const at::Tensor& out, int64_t interpolation,
                                         const std::optional<at::Tensor>& color_in) {
  check_batch_arguments(images, shapes_in, boxes_in, flips_in, scale, mean_in, std_in, out);
  if (color_in.has_value()) check_color(*color_in, out);
  const auto* color = color_in.has_value()
                          ? reinterpret_cast<const augment::color::ColorPass*>(color_in->data_ptr<uint8_t>())
                          : nullptr;
  const Interpolation mode = check_interpolation(kBatchOp, interpolation);
  const int64_t N = out.size(0), C = out.size(1), OH = out.size(2), OW = out.size(3);
  const at::Tensor shapes = shapes_in.contiguous(), boxes = boxes_in.contiguous(), flips = flips_in.contiguous();
  const at::Tensor mean = mean_in.contiguous(), std = std_in.contiguous();
  const int64_t* shape = shapes.data_ptr<int64_t>();
  const float* box = boxes.data_ptr<float>();
  const bool* flip = flips.data_ptr<bool>();
  const int64_t flip_columns = flips.dim() == 2 ? 2 : 1;  // [N]: left-right only; [N, 2]: both
  check_normalize(kBatchOp, mean.data_ptr<float>(), std.data_ptr<float>(), static_cast<int>(C));
  // Validate every sample before writing anything: an error leaves `out` untouched.
  const int64_t numel = images.numel();
  for (int64_t i = 0; i < N; ++i) {
    const int64_t offset = shape[4 * i], h = shape[4 * i + 1], w = shape[4 * i + 2], stride = shape[4 * i + 3];
    FASTLOAD_CHECK_VALUE(batch_image_valid(shape + 4 * i, C, numel), kBatchOp, "expected shapes[", i,
                         "] = (offset, height, width, row_stride) of an HWC image with ", C,
                         " channels inside images (", numel, " bytes; offset >= 0, height, width > 0, "
                         "width * channels < 2^31, row_stride >= width * channels), got (", offset, ", ", h,
                         ", ", w, ", ", stride, "). Check the packing offsets.");
    check_box(kBatchOp, box[4 * i], box[4 * i + 1], box[4 * i + 2], box[4 * i + 3], i);
    FASTLOAD_CHECK_VALUE(color == nullptr || augment::color::color_pass_valid(color[i], static_cast<int>(OH),
                                                                              static_cast<int>(OW)),
                         kBatchOp, "expected color[", i, "] to be a colour record of a ", OH, "x", OW,
                         " sample (erased rectangle inside it, the jitter order a permutation), got another. "
                         "Make the records with fastload._C.color_passes for this output size.");
  }
  if (N == 0 || out.numel() == 0) return;
  const uint8_t* data = images.data_ptr<uint8_t>();
  char* out_base = static_cast<char*>(out.data_ptr());
  const int64_t item = out.element_size();
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    ResizeScratch scratch;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t* s = shape + 4 * i;
      const float* b = box + 4 * i;
      ImageView in{data + s[0], static_cast<int>(s[1]), static_cast<int>(s[2]), static_cast<int>(C), s[3]};
      OutputView view{out_base + i * out.stride(0) * item, out.scalar_type(), static_cast<int>(C),
                      static_cast<int>(OH), static_cast<int>(OW), out.stride(1), out.stride(2), out.stride(3)};
      const Resample resample{flip[flip_columns * i], flip_columns == 2 && flip[2 * i + 1], mode};
      crop_resize_flip_normalize_cpu(in, Box{b[0], b[1], b[2], b[3]}, resample, static_cast<float>(scale),
                                     mean.data_ptr<float>(), std.data_ptr<float>(), view, scratch,
                                     color != nullptr ? color + i : nullptr);
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) {
  m.impl("crop_resize_flip_normalize", &crop_resize_flip_normalize_op);
  m.impl("crop_resize_flip_normalize_batch", &crop_resize_flip_normalize_batch_op);
}

}  // namespace fastload
