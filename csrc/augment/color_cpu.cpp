// CPU ops of the colour math (color.h) and its random parameters (color_params.h): the
// reference path of ColorJitter, Grayscale and RandomErasing, and what the tests hold
// against torchvision. One image per call, one thread; the fused kernels will call the
// same header functions per pixel.
//
// Images are HWC with packed pixels (column stride == channels) and any row stride:
// uint8 runs torchvision's PIL semantics, float32 its tensor semantics (color.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "augment/color.h"
#include "augment/color_params.h"
#include "check.h"

namespace fastload {
namespace {

using augment::color::EraseBox;
using augment::color::JitterParams;
using augment::color::JitterRanges;

// A packed-pixel HWC image, any row stride (the kernel's ImageView, writable).
template <typename T>
struct PixelView {
  T* data;
  int64_t height, width, channels, row_stride;  // row_stride in elements
  T* pixel(int64_t y, int64_t x) const { return data + y * row_stride + x * channels; }
};

void check_image(const at::Tensor& image, const char* op, bool float_only = false) {
  FASTLOAD_CHECK_VALUE(image.dim() == 3 && (image.size(2) == 1 || image.size(2) == 3), op,
                       "expected an HWC image [H, W, 1 or 3], got shape ", image.sizes(),
                       ". Permute a CHW tensor with .permute(1, 2, 0).");
  if (float_only) {
    FASTLOAD_CHECK_VALUE(image.scalar_type() == at::kFloat, op, "expected a float32 image, got ",
                         image.scalar_type(), ". Erasing runs on the normalised float image.");
  } else {
    FASTLOAD_CHECK_VALUE(image.scalar_type() == at::kByte || image.scalar_type() == at::kFloat, op,
                         "expected a uint8 (PIL semantics) or float32 (tensor semantics) image, got ",
                         image.scalar_type(), ".");
  }
}

// The result as a fresh HWC tensor; a view of it with its row stride.
template <typename T>
PixelView<T> view_of(at::Tensor& out) {
  return {out.data_ptr<T>(), out.size(0), out.size(1), out.size(2), out.stride(0)};
}

at::Tensor packed_copy(const at::Tensor& image) {
  // Keeps a row-strided input's layout question out of the loops: they read the copy
  // through its own row stride, the way the engine's views are read.
  return image.contiguous().clone();
}

// ColorJitter on a uint8 image: the ops before contrast (if any), then the mean of the
// image at that point, then the rest. Two passes at most, as a fused kernel would.
void jitter_uint8(const PixelView<uint8_t>& img, const JitterParams& p) {
  const int channels = static_cast<int>(img.channels);
  const int pos = augment::color::contrast_position(p);
  int mean = 0;
  if (pos < 4) {
    uint64_t sum = 0;
    for (int64_t y = 0; y < img.height; ++y)
      for (int64_t x = 0; x < img.width; ++x) {
        uint8_t* px = img.pixel(y, x);
        augment::color::pil_jitter(px, channels, p, 0, pos, 0);
        sum += augment::color::pil_luma(px, channels);
      }
    mean = augment::color::pil_contrast_mean(sum, img.height * img.width);
  }
  const int begin = pos < 4 ? pos : 0;
  for (int64_t y = 0; y < img.height; ++y)
    for (int64_t x = 0; x < img.width; ++x)
      augment::color::pil_jitter(img.pixel(y, x), channels, p, begin, 4, mean);
}

void jitter_float(const PixelView<float>& img, const JitterParams& p) {
  const int channels = static_cast<int>(img.channels);
  const int pos = augment::color::contrast_position(p);
  float mean = 0.0f;
  if (pos < 4) {
    double sum = 0.0;
    for (int64_t y = 0; y < img.height; ++y)
      for (int64_t x = 0; x < img.width; ++x) {
        float* px = img.pixel(y, x);
        augment::color::tv_jitter(px, channels, p, 0, pos, 0.0f);
        sum += augment::color::tv_grey(px, channels);
      }
    const int64_t count = img.height * img.width;
    mean = count > 0 ? static_cast<float>(sum / static_cast<double>(count)) : 0.0f;
  }
  const int begin = pos < 4 ? pos : 0;
  for (int64_t y = 0; y < img.height; ++y)
    for (int64_t x = 0; x < img.width; ++x)
      augment::color::tv_jitter(img.pixel(y, x), channels, p, begin, 4, mean);
}

at::Tensor jitter(const at::Tensor& image, const JitterParams& p, const char* op) {
  check_image(image, op);
  auto out = packed_copy(image);
  if (out.scalar_type() == at::kByte) {
    jitter_uint8(view_of<uint8_t>(out), p);
  } else {
    jitter_float(view_of<float>(out), p);
  }
  return out;
}

JitterParams single_op(int op, double factor) {
  JitterParams p;
  for (int k = 0; k < 4; ++k) {
    p.order[k] = k;
    p.enabled[k] = k == op;
    p.factor[k] = k == op ? static_cast<float>(factor) : 0.0f;
  }
  return p;
}

void check_factor(double factor, const char* op, const char* name) {
  FASTLOAD_CHECK_VALUE(std::isfinite(factor) && factor >= 0, op, "expected a finite non-negative ", name,
                       ", got ", factor, ".");
}

at::Tensor adjust_brightness_cpu(const at::Tensor& image, double factor) {
  check_factor(factor, "adjust_brightness", "brightness_factor");
  return jitter(image, single_op(augment::color::kBrightness, factor), "adjust_brightness");
}

at::Tensor adjust_contrast_cpu(const at::Tensor& image, double factor) {
  check_factor(factor, "adjust_contrast", "contrast_factor");
  return jitter(image, single_op(augment::color::kContrast, factor), "adjust_contrast");
}

at::Tensor adjust_saturation_cpu(const at::Tensor& image, double factor) {
  check_factor(factor, "adjust_saturation", "saturation_factor");
  return jitter(image, single_op(augment::color::kSaturation, factor), "adjust_saturation");
}

at::Tensor adjust_hue_cpu(const at::Tensor& image, double factor) {
  FASTLOAD_CHECK_VALUE(factor >= -0.5 && factor <= 0.5, "adjust_hue", "expected hue_factor in [-0.5, 0.5], got ",
                       factor, ".");
  return jitter(image, single_op(augment::color::kHue, factor), "adjust_hue");
}

// order: the 4 op ids (0 brightness, 1 contrast, 2 saturation, 3 hue) in application
// order; factors[op]: NaN where the op is off (torchvision's None).
at::Tensor color_jitter_cpu(const at::Tensor& image, at::IntArrayRef order, at::ArrayRef<double> factors) {
  const char* op = "color_jitter";
  FASTLOAD_CHECK_VALUE(order.size() == 4 && factors.size() == 4, op,
                       "expected order (4 op ids) and factors (4 values, NaN = off), got ", order.size(), " and ",
                       factors.size(), " values.");
  JitterParams p;
  bool seen[4] = {false, false, false, false};
  for (int k = 0; k < 4; ++k) {
    FASTLOAD_CHECK_VALUE(order[k] >= 0 && order[k] < 4 && !seen[order[k]], op,
                         "expected order as a permutation of 0..3, got ", order, ".");
    seen[order[k]] = true;
    p.order[k] = static_cast<int>(order[k]);
    p.enabled[k] = !std::isnan(factors[k]);
    p.factor[k] = p.enabled[k] ? static_cast<float>(factors[k]) : 0.0f;
  }
  return jitter(image, p, op);
}

at::Tensor rgb_to_grayscale_cpu(const at::Tensor& image, int64_t num_output_channels) {
  const char* op = "rgb_to_grayscale";
  check_image(image, op);
  FASTLOAD_CHECK_VALUE(num_output_channels == 1 || num_output_channels == 3, op,
                       "expected num_output_channels 1 or 3, got ", num_output_channels, ".");
  const auto in = packed_copy(image);
  auto out = at::empty({in.size(0), in.size(1), num_output_channels}, in.options());
  const int channels = static_cast<int>(in.size(2)), out_channels = static_cast<int>(num_output_channels);
  if (in.scalar_type() == at::kByte) {
    auto src = in;
    const auto s = view_of<uint8_t>(src);
    const auto d = view_of<uint8_t>(out);
    for (int64_t y = 0; y < s.height; ++y)
      for (int64_t x = 0; x < s.width; ++x)
        augment::color::pil_grayscale(s.pixel(y, x), channels, d.pixel(y, x), out_channels);
  } else {
    auto src = in;
    const auto s = view_of<float>(src);
    const auto d = view_of<float>(out);
    for (int64_t y = 0; y < s.height; ++y)
      for (int64_t x = 0; x < s.width; ++x)
        augment::color::tv_grayscale(s.pixel(y, x), channels, d.pixel(y, x), out_channels);
  }
  return out;
}

void check_indices(const at::Tensor& indices, const char* op) {
  FASTLOAD_CHECK_VALUE(indices.dim() == 1 && indices.scalar_type() == at::kLong, op,
                       "expected indices as a 1-D int64 tensor, got ", indices.dim(), "-D ",
                       indices.scalar_type(), ".");
}

// ranges: [b_min, b_max, c_min, c_max, s_min, s_max, h_min, h_max], a NaN pair = off;
// p: the probability that the jitter runs (RandomApply).
// Returns (order int64 [N, 4], factors float32 [N, 4], NaN where off or not applied).
std::tuple<at::Tensor, at::Tensor> color_jitter_params_cpu(const at::Tensor& indices, int64_t seed, int64_t epoch,
                                                           at::ArrayRef<double> ranges, double p) {
  const char* op = "color_jitter_params";
  check_indices(indices, op);
  FASTLOAD_CHECK_VALUE(ranges.size() == 8, op, "expected 8 range values (min, max per op), got ", ranges.size(),
                       ".");
  FASTLOAD_CHECK_VALUE(std::isfinite(p) && p >= 0 && p <= 1, op, "expected p in [0, 1], got ", p, ".");
  JitterRanges r;
  r.p = p;
  for (int k = 0; k < 4; ++k) {
    r.min[k] = ranges[2 * k];
    r.max[k] = ranges[2 * k + 1];
    r.enabled[k] = !std::isnan(r.min[k]) && !std::isnan(r.max[k]);
    FASTLOAD_CHECK_VALUE(!r.enabled[k] || (std::isfinite(r.min[k]) && std::isfinite(r.max[k]) && r.min[k] <= r.max[k]),
                         op, "expected each range as finite (min, max) with min <= max, got ", ranges, ".");
  }
  const auto idx = indices.contiguous();
  const int64_t n = idx.size(0);
  auto order = at::empty({n, 4}, idx.options());
  auto factors = at::empty({n, 4}, idx.options().dtype(at::kFloat));
  const int64_t* index_data = idx.data_ptr<int64_t>();
  int64_t* order_data = order.data_ptr<int64_t>();
  float* factor_data = factors.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const JitterParams p = augment::color::color_jitter_params(r, seed, epoch, index_data[i]);
    for (int k = 0; k < 4; ++k) {
      order_data[4 * i + k] = p.order[k];
      factor_data[4 * i + k] = p.enabled[k] ? p.factor[k] : std::numeric_limits<float>::quiet_NaN();
    }
  }
  return {order, factors};
}

at::Tensor random_grayscale_params_cpu(const at::Tensor& indices, int64_t seed, int64_t epoch, double p) {
  check_indices(indices, "random_grayscale_params");
  const auto idx = indices.contiguous();
  auto out = at::empty({idx.size(0)}, idx.options().dtype(at::kBool));
  const int64_t* index_data = idx.data_ptr<int64_t>();
  bool* out_data = out.data_ptr<bool>();
  for (int64_t i = 0; i < idx.size(0); ++i)
    out_data[i] = augment::color::random_grayscale(p, seed, epoch, index_data[i]);
  return out;
}

// Boxes int64 [N, 4] (top, left, height, width) on an image of height x width; zeros
// where nothing is erased.
at::Tensor random_erasing_params_cpu(const at::Tensor& indices, int64_t seed, int64_t epoch, int64_t height,
                                     int64_t width, double p, at::ArrayRef<double> scale,
                                     at::ArrayRef<double> ratio) {
  const char* op = "random_erasing_params";
  check_indices(indices, op);
  FASTLOAD_CHECK_VALUE(height > 0 && width > 0 && height <= INT32_MAX && width <= INT32_MAX, op,
                       "expected a positive image size, got ", height, "x", width, ".");
  FASTLOAD_CHECK_VALUE(scale.size() == 2 && ratio.size() == 2 && ratio[0] > 0 && ratio[1] > 0, op,
                       "expected scale and ratio as (min, max) with positive ratios, got scale=", scale,
                       ", ratio=", ratio, ".");
  const auto idx = indices.contiguous();
  auto boxes = at::empty({idx.size(0), 4}, idx.options());
  const int64_t* index_data = idx.data_ptr<int64_t>();
  int64_t* box_data = boxes.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx.size(0); ++i) {
    const EraseBox b = augment::color::random_erasing_box(static_cast<int>(height), static_cast<int>(width), p,
                                                          scale[0], scale[1], ratio[0], ratio[1], seed, epoch,
                                                          index_data[i]);
    box_data[4 * i + 0] = b.top;
    box_data[4 * i + 1] = b.left;
    box_data[4 * i + 2] = b.height;
    box_data[4 * i + 3] = b.width;
  }
  return boxes;
}

// Erases box = (top, left, height, width) of a float32 HWC image with value: [] = a
// standard normal per element (color_params.h, from (seed, epoch, index)), [v] = v
// everywhere, [v_0 .. v_{C-1}] per channel.
at::Tensor erase_cpu(const at::Tensor& image, at::IntArrayRef box, at::ArrayRef<double> value, int64_t seed,
                     int64_t epoch, int64_t index) {
  const char* op = "erase";
  check_image(image, op, /*float_only=*/true);
  const int64_t channels = image.size(2);
  FASTLOAD_CHECK_VALUE(box.size() == 4 && box[0] >= 0 && box[1] >= 0 && box[2] >= 0 && box[3] >= 0 &&
                           box[0] <= image.size(0) && box[2] <= image.size(0) - box[0] &&
                           box[1] <= image.size(1) && box[3] <= image.size(1) - box[1],
                       op, "expected box (top, left, height, width) inside the ", image.size(0), "x", image.size(1),
                       " image, got ", box, ".");
  FASTLOAD_CHECK_VALUE(value.size() == 0 || value.size() == 1 || static_cast<int64_t>(value.size()) == channels, op,
                       "expected value as [] (random), one value or ", channels, " (one per channel), got ",
                       value.size(), " values.");
  auto out = packed_copy(image);
  const auto img = view_of<float>(out);
  const EraseBox b = {static_cast<int>(box[0]), static_cast<int>(box[1]), static_cast<int>(box[2]),
                      static_cast<int>(box[3])};
  const SampleRng values = augment::color::erase_value_rng(seed, epoch, index);
  for (int64_t y = b.top; y < b.top + b.height; ++y)
    for (int64_t x = b.left; x < b.left + b.width; ++x) {
      float* px = img.pixel(y, x);
      for (int64_t c = 0; c < channels; ++c) {
        if (value.empty()) {
          px[c] = augment::color::erase_normal(
              values, augment::color::erase_element(b, static_cast<int>(c), static_cast<int>(y),
                                                    static_cast<int>(x)));
        } else {
          px[c] = static_cast<float>(value.size() == 1 ? value[0] : value[c]);
        }
      }
    }
  return out;
}

}  // namespace


TORCH_LIBRARY_IMPL(fastload, CPU, m) {
  m.impl("adjust_brightness", &adjust_brightness_cpu);
  m.impl("adjust_contrast", &adjust_contrast_cpu);
  m.impl("adjust_saturation", &adjust_saturation_cpu);
  m.impl("adjust_hue", &adjust_hue_cpu);
  m.impl("color_jitter", &color_jitter_cpu);
  m.impl("rgb_to_grayscale", &rgb_to_grayscale_cpu);
  m.impl("erase", &erase_cpu);
  m.impl("color_jitter_params", &color_jitter_params_cpu);
  m.impl("random_grayscale_params", &random_grayscale_params_cpu);
  m.impl("random_erasing_params", &random_erasing_params_cpu);
}

}  // namespace fastload
