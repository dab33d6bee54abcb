// Argument checks of the crop_resize_flip_normalize ops, written once for both backends:
// the CPU ops (crop_resize_flip_normalize_cpu.cpp) and the CUDA ops
// (crop_resize_flip_normalize_cuda.cu) call these, so both accept exactly the same
// arguments and say the same thing, fix included, when they do not. Backend-neutral:
// compiled in every build, no CUDA headers.
#include <ATen/core/Tensor.h>

#include <climits>
#include <cstdint>
#include <cmath>
#include <string>

#include "augment/color_pass.h"
#include "augment/crop_resize_flip_normalize_checks.h"
#include "check.h"

namespace fastload {
namespace {

constexpr const char* kOp = "crop_resize_flip_normalize";
constexpr const char* kBatchOp = "crop_resize_flip_normalize_batch";

bool supported_dtype(at::ScalarType dtype) {
  return dtype == at::kByte || dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16;
}

}  // namespace

void check_box(const char* op, float top, float left, float height, float width, int64_t index) {
  FASTLOAD_CHECK_VALUE(std::isfinite(top) && std::isfinite(left) && std::isfinite(height) &&
                           std::isfinite(width) && height > 0 && width > 0,
                       op, "expected a box [top, left, height, width] of finite floats with height > 0 and width > 0, got [",
                       top, ", ", left, ", ", height, ", ", width, "]",
                       index >= 0 ? " for sample " + std::to_string(index) : std::string(),
                       ". Pass the crop in image pixels.");
}

Interpolation check_interpolation(const char* op, int64_t interpolation) {
  FASTLOAD_CHECK_VALUE(interpolation >= 0 && interpolation < kInterpolationCount, op,
                       "expected interpolation 0 (bilinear), 1 (bicubic), 2 (nearest) or 3 (bilinear without "
                       "antialiasing), got ", interpolation,
                       ". Pass int(fastload._C.Interpolation.<MODE>) or use fastload.ops, which takes names.");
  return static_cast<Interpolation>(interpolation);
}

void check_normalize(const char* op, const float* mean, const float* std, int channels) {
  for (int c = 0; c < channels; ++c)
    FASTLOAD_CHECK_VALUE(std::isfinite(mean[c]) && std::isfinite(std[c]) && std[c] != 0, op,
                         "expected finite mean and non-zero finite std, got mean[", c, "]=", mean[c],
                         ", std[", c, "]=", std[c], ". Use std=1 for no scaling.");
}

void check_arguments(const at::Tensor& image, at::ArrayRef<double> box, at::IntArrayRef size, double scale,
                     at::ArrayRef<double> mean, at::ArrayRef<double> std, at::ScalarType dtype, float* mean_f,
                     float* std_f) {
  FASTLOAD_CHECK_VALUE(image.scalar_type() == at::kByte && image.dim() == 3, kOp,
                       "expected a uint8 [H, W, C] image, got ", image.scalar_type(), " of shape ",
                       image.sizes(), ". Decode to uint8 HWC (fastload.ops.decode_jpeg and decode_jpeg_cuda do).");
  const int64_t H = image.size(0), W = image.size(1), C = image.size(2);
  FASTLOAD_CHECK_VALUE(C == 1 || C == 3, kOp, "expected 1 or 3 channels, got ", C,
                       ". Convert the image to gray or RGB first.");
  FASTLOAD_CHECK_VALUE(H > 0 && W > 0, kOp, "expected a non-empty image, got shape ", image.sizes(), ".");
  FASTLOAD_CHECK_VALUE(image.stride(2) == 1 && image.stride(1) == C && image.stride(0) >= W * C, kOp,
                       "expected packed pixels (strides [row >= W*C, C, 1]), got strides ",
                       image.strides(), ". Call .contiguous() on the image.");
  FASTLOAD_CHECK_VALUE(H <= INT_MAX && W * C <= INT_MAX, kOp,
                       "expected an image under 2^31 rows and 2^31 bytes per row, got ", image.sizes(), ".");
  FASTLOAD_CHECK_VALUE(box.size() == 4, kOp, "expected box = [top, left, height, width], got ", box.size(),
                       " values.");
  check_box(kOp, box[0], box[1], box[2], box[3], -1);
  FASTLOAD_CHECK_VALUE(size.size() == 2 && size[0] >= 0 && size[1] >= 0 && size[0] <= INT_MAX &&
                           size[1] <= INT_MAX,
                       kOp, "expected size = [out_height, out_width] >= 0, got ", size, ".");
  FASTLOAD_CHECK_VALUE(static_cast<int64_t>(mean.size()) == C && static_cast<int64_t>(std.size()) == C, kOp,
                       "expected mean and std with one value per channel (", C, "), got ", mean.size(),
                       " and ", std.size(), ".");
  FASTLOAD_CHECK_VALUE(supported_dtype(dtype), kOp, "expected dtype uint8, float32, float16 or bfloat16, got ",
                       dtype, ".");
  FASTLOAD_CHECK_VALUE(std::isfinite(scale), kOp, "expected a finite scale, got ", scale, ".");
  for (int64_t c = 0; c < C; ++c) {
    mean_f[c] = static_cast<float>(mean[c]);
    std_f[c] = static_cast<float>(std[c]);
  }
  check_normalize(kOp, mean_f, std_f, static_cast<int>(C));
}

void check_color(const at::Tensor& color, const at::Tensor& out) {
  const int64_t record = static_cast<int64_t>(sizeof(augment::color::ColorPass));
  FASTLOAD_CHECK_VALUE(color.scalar_type() == at::kByte && color.dim() == 2 && color.size(0) == out.size(0) &&
                           color.size(1) == record && color.is_contiguous(),
                       kBatchOp, "expected color as contiguous uint8 [", out.size(0), ", ", record,
                       "] (one record per sample, from fastload._C.color_passes), got ", color.scalar_type(), " ",
                       color.sizes(), ".");
  FASTLOAD_CHECK_VALUE(reinterpret_cast<uintptr_t>(color.data_ptr()) % alignof(augment::color::ColorPass) == 0, kBatchOp,
                       "expected color's data aligned to ", alignof(augment::color::ColorPass),
                       " bytes, got a view at another offset. Pass whole records (a .clone() of the view).");
  FASTLOAD_CHECK_VALUE(color.device() == out.device(), kBatchOp, "expected color on ", out.device(), " (out's device), got ",
                       color.device(), ". Move it with .to(out.device).");
}

void check_batch_arguments(const at::Tensor& images, const at::Tensor& shapes, const at::Tensor& boxes,
                           const at::Tensor& flips, double scale, const at::Tensor& mean, const at::Tensor& std,
                           const at::Tensor& out) {
  FASTLOAD_CHECK_VALUE(std::isfinite(scale), kBatchOp, "expected a finite scale, got ", scale, ".");
  FASTLOAD_CHECK_VALUE(out.dim() == 4, kBatchOp, "expected out [N, C, H, W], got shape ", out.sizes(), ".");
  const int64_t N = out.size(0), C = out.size(1);
  FASTLOAD_CHECK_VALUE(C == 1 || C == 3, kBatchOp, "expected out with 1 or 3 channels, got ", C, ".");
  FASTLOAD_CHECK_VALUE(supported_dtype(out.scalar_type()), kBatchOp,
                       "expected out of dtype uint8, float32, float16 or bfloat16, got ", out.scalar_type(), ".");
  FASTLOAD_CHECK_VALUE(out.size(2) <= INT_MAX && out.size(3) <= INT_MAX, kBatchOp,
                       "expected out sides under 2^31, got ", out.sizes(), ".");
  FASTLOAD_CHECK_VALUE(images.scalar_type() == at::kByte && images.dim() == 1 && images.is_contiguous(),
                       kBatchOp, "expected images as a contiguous uint8 1-D tensor, got ", images.scalar_type(),
                       " of shape ", images.sizes(), ". Pack the HWC images with torch.cat([im.flatten() ...]).");
  FASTLOAD_CHECK_VALUE(shapes.scalar_type() == at::kLong && shapes.dim() == 2 && shapes.size(0) == N &&
                           shapes.size(1) == 4,
                       kBatchOp, "expected shapes int64 [", N, ", 4] (offset, height, width, row_stride), got ",
                       shapes.scalar_type(), " ", shapes.sizes(), ".");
  FASTLOAD_CHECK_VALUE(boxes.scalar_type() == at::kFloat && boxes.dim() == 2 && boxes.size(0) == N &&
                           boxes.size(1) == 4,
                       kBatchOp, "expected boxes float32 [", N, ", 4] (top, left, height, width), got ",
                       boxes.scalar_type(), " ", boxes.sizes(), ".");
  FASTLOAD_CHECK_VALUE(flips.scalar_type() == at::kBool && flips.size(0) == N &&
                           (flips.dim() == 1 || (flips.dim() == 2 && flips.size(1) == 2)),
                       kBatchOp, "expected flips bool [", N, "] (left-right) or [", N,
                       ", 2] (left-right, top-bottom), got ", flips.scalar_type(), " ", flips.sizes(), ".");
  FASTLOAD_CHECK_VALUE(mean.scalar_type() == at::kFloat && std.scalar_type() == at::kFloat && mean.dim() == 1 &&
                           std.dim() == 1 && mean.size(0) == C && std.size(0) == C,
                       kBatchOp, "expected mean and std float32 [", C, "], got ", mean.scalar_type(), " ",
                       mean.sizes(), " and ", std.scalar_type(), " ", std.sizes(), ".");
  for (const at::Tensor* t : {&images, &shapes, &boxes, &flips, &mean, &std})
    FASTLOAD_CHECK_VALUE(t->device() == out.device(), kBatchOp, "expected every tensor on ", out.device(),
                         " (out's device), got one on ", t->device(), ". Move them with .to(out.device).");
}

}  // namespace fastload
