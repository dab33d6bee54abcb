// TrivialAugmentWide / RandAugment / AutoAugment on the CPU (autoaugment_cpu.h), and the ops
// fastload::auto_augment (ops with given magnitudes on one image) and
// fastload::auto_augment_params (the per-sample draws).
#include "augment/autoaugment_cpu.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "augment/color.h"
#include "augment/value_vectors.h"
#include "check.h"

namespace fastload {

namespace aa = augment::autoaugment;
namespace color = augment::color;

namespace {

// Python's float % (the result takes the divisor's sign).
double python_mod(double x, double y) {
  double mod = std::fmod(x, y);
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) mod += y;
  } else {
    mod = std::copysign(0.0, y);
  }
  return mod;
}

// Python's round(x, 15): correctly rounded to 15 decimals (glibc's printf rounds the
// exact binary value, half to even, as CPython's dtoa does), then read back.
double python_round15(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.15f", x);
  return std::strtod(text, nullptr);
}

}  // namespace

void inverse_affine_matrix(double cx, double cy, double angle, double tx, double ty, double shear_x, double shear_y,
                           double* m) {
  using color::dmul_rn;
  const double rot = angle * kDegToRad, sx = shear_x * kDegToRad, sy = shear_y * kDegToRad;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = dmul_rn(-std::cos(rot - sy), std::tan(sx)) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = dmul_rn(-std::sin(rot - sy), std::tan(sx)) / std::cos(sy) + std::cos(rot);
  m[0] = d;
  m[1] = -b;
  m[2] = 0.0;
  m[3] = -c;
  m[4] = a;
  m[5] = 0.0;
  m[2] += dmul_rn(m[0], -cx - tx) + dmul_rn(m[1], -cy - ty);
  m[5] += dmul_rn(m[3], -cx - tx) + dmul_rn(m[4], -cy - ty);
  m[2] += cx;
  m[5] += cy;
}

AffineOp affine_op(int op, double magnitude, int width, int height) {
  AffineOp out;
  double* m = out.matrix;
  switch (op) {
    case aa::kShearX:  // F.affine(shear=[degrees(atan(m)), 0], center=[0, 0])
      inverse_affine_matrix(0, 0, 0, 0, 0, std::atan(magnitude) * kRadToDeg, 0, m);
      break;
    case aa::kShearY:
      inverse_affine_matrix(0, 0, 0, 0, 0, 0, std::atan(magnitude) * kRadToDeg, m);
      break;
    case aa::kTranslateX:  // F.affine(translate=[int(m), 0]) about the PIL centre
      inverse_affine_matrix(width * 0.5, height * 0.5, 0, std::trunc(magnitude), 0, 0, 0, m);
      break;
    case aa::kTranslateY:
      inverse_affine_matrix(width * 0.5, height * 0.5, 0, 0, std::trunc(magnitude), 0, 0, m);
      break;
    case aa::kRotate: {  // Image.rotate(m, NEAREST, expand=False)
      const double angle = python_mod(magnitude, 360.0);
      if (angle == 0.0) return {AffineOp::kCopy, {}};
      if (angle == 180.0) return {AffineOp::kRotate180, {}};
      if ((angle == 90.0 || angle == 270.0) && width == height)
        return {angle == 90.0 ? AffineOp::kRotate90 : AffineOp::kRotate270, {}};
      const double cx = width / 2.0, cy = height / 2.0;
      const double r = -(angle * kDegToRad);
      m[0] = python_round15(std::cos(r));
      m[1] = python_round15(std::sin(r));
      m[2] = 0.0;
      m[3] = python_round15(-std::sin(r));
      m[4] = python_round15(std::cos(r));
      m[5] = 0.0;
      using color::dmul_rn;
      const double x = -cx, y = -cy;
      const double m2 = dmul_rn(m[0], x) + dmul_rn(m[1], y) + m[2];
      const double m5 = dmul_rn(m[3], x) + dmul_rn(m[4], y) + m[5];
      m[2] = m2 + cx;
      m[5] = m5 + cy;
      break;
    }
    default:
      out.kind = AffineOp::kCopy;
  }
  return out;
}

namespace {

// dst (filled with `fill` where no source pixel maps) = src under Pillow's nearest
// affine transform with matrix a (Geometry.c ImagingTransformAffine).
void pil_affine(const uint8_t* src, uint8_t* dst, int h, int w, int C, const double* a, const uint8_t* fill) {
  const int64_t row = static_cast<int64_t>(w) * C;
  for (int64_t i = 0; i < static_cast<int64_t>(h) * w; ++i)
    for (int c = 0; c < C; ++c) dst[i * C + c] = fill[c];
  auto copy = [&](int y, int x, int yin, int xin) {  // one pixel, its bytes inline (C is 1 or 3)
    uint8_t* to = dst + y * row + static_cast<int64_t>(x) * C;
    const uint8_t* from = src + yin * row + static_cast<int64_t>(xin) * C;
    to[0] = from[0];
    if (C == 3) {
      to[1] = from[1];
      to[2] = from[2];
    }
  };
  switch (aa::affine_path(a, w, h)) {
    case aa::AffinePath::kScale: {  // ImagingScaleAffine: doubles, a column table
      thread_local std::vector<int> xintab;
      xintab.assign(static_cast<size_t>(w), 0);
      double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
      int xmin = w, xmax = 0;
      for (int x = 0; x < w; ++x, xo += a[0]) {
        const int xin = aa::pil_coord(xo);
        if (xin >= 0 && xin < w) {
          xmax = x + 1;
          if (x < xmin) xmin = x;
          xintab[x] = xin;
        }
      }
      for (int y = 0; y < h; ++y, yo += a[4]) {
        const int yi = aa::pil_coord(yo);
        if (yi < 0 || yi >= h) continue;
        for (int x = xmin; x < xmax; ++x) copy(y, x, yi, xintab[x]);
      }
      return;
    }
    case aa::AffinePath::kFixed: {  // affine_fixed: 16.16 fixed point
      const int64_t a0 = aa::pil_fix(a[0]), a1 = aa::pil_fix(a[1]), a3 = aa::pil_fix(a[3]), a4 = aa::pil_fix(a[4]);
      int64_t a2 = aa::pil_fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
      int64_t a5 = aa::pil_fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
      for (int y = 0; y < h; ++y, a2 += a1, a5 += a4) {
        int64_t xx = a2, yy = a5;
        for (int x = 0; x < w; ++x, xx += a0, yy += a3) {
          const int64_t xin = xx >> 16;
          if (xin < 0 || xin >= w) continue;
          const int64_t yin = yy >> 16;
          if (yin >= 0 && yin < h) copy(y, x, static_cast<int>(yin), static_cast<int>(xin));
        }
      }
      return;
    }
    case aa::AffinePath::kFloat: {  // corners beyond +-32768: doubles
      double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
      for (int y = 0; y < h; ++y, xo += a[1], yo += a[4]) {
        double xx = xo, yy = yo;
        for (int x = 0; x < w; ++x, xx += a[0], yy += a[3]) {
          const int xin = aa::pil_coord(xx);
          if (xin < 0 || xin >= w) continue;
          const int yin = aa::pil_coord(yy);
          if (yin >= 0 && yin < h) copy(y, x, yin, xin);
        }
      }
      return;
    }
  }
}

// The same with Pillow's BILINEAR filter (ImagingGenericTransform, bilinear_filter8 /
// 32RGB): the pixel centre mapped in doubles, outside the image -> fill, else the 2x2
// neighbourhood (clamped to the image) blended in doubles and truncated.
void pil_affine_bilinear(const uint8_t* src, uint8_t* dst, int h, int w, int C, const double* a, const uint8_t* fill) {
  using color::dmul_rn;
  const int64_t row = static_cast<int64_t>(w) * C;
  // A translation by whole pixels (TranslateX/Y: torchvision's int(magnitude)): every
  // centre maps onto a source centre, x + a[2] exactly, so the blend's distances are 0
  // and its value is that pixel's (lo + (hi - lo) * 0 = lo): a shifted copy, the pixels
  // that map outside reading the fill, as the generic loop below gives them.
  if (a[0] == 1.0 && a[1] == 0.0 && a[3] == 0.0 && a[4] == 1.0 && a[2] == std::floor(a[2]) &&
      a[5] == std::floor(a[5]) && std::fabs(a[2]) < 1 << 30 && std::fabs(a[5]) < 1 << 30) {
    const int64_t dx = static_cast<int64_t>(a[2]), dy = static_cast<int64_t>(a[5]);
    const int64_t x_begin = std::clamp<int64_t>(-dx, 0, w), x_end = std::clamp<int64_t>(w - dx, 0, w);
    for (int y = 0; y < h; ++y) {
      uint8_t* out = dst + y * row;
      for (int x = 0; x < w; ++x) std::memcpy(out + static_cast<int64_t>(x) * C, fill, C);
      const int64_t sy = y + dy;
      if (sy < 0 || sy >= h || x_begin >= x_end) continue;
      std::memcpy(out + x_begin * C, src + sy * row + (x_begin + dx) * C, static_cast<size_t>((x_end - x_begin) * C));
    }
    return;
  }
  auto clip = [](int v, int size) { return v < 0 ? 0 : (v < size ? v : size - 1); };
  auto lerp = [](double lo, double hi, double d) { return lo + dmul_rn(hi - lo, d); };
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* out = dst + y * row + static_cast<int64_t>(x) * C;
      const double px = x + 0.5, py = y + 0.5;
      double xin = dmul_rn(a[0], px) + dmul_rn(a[1], py) + a[2];
      double yin = dmul_rn(a[3], px) + dmul_rn(a[4], py) + a[5];
      if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h) {
        std::memcpy(out, fill, C);
        continue;
      }
      xin -= 0.5;
      yin -= 0.5;
      const int x0 = xin < 0.0 ? static_cast<int>(std::floor(xin)) : static_cast<int>(xin);
      const int y0 = yin < 0.0 ? static_cast<int>(std::floor(yin)) : static_cast<int>(yin);
      const double dx = xin - x0, dy = yin - y0;
      const uint8_t* top = src + clip(y0, h) * row;
      const uint8_t* bottom = y0 + 1 >= 0 && y0 + 1 < h ? src + (y0 + 1) * row : nullptr;
      const int64_t c0 = static_cast<int64_t>(clip(x0, w)) * C, c1 = static_cast<int64_t>(clip(x0 + 1, w)) * C;
      for (int c = 0; c < C; ++c) {
        const double v1 = lerp(top[c0 + c], top[c1 + c], dx);
        const double v2 = bottom != nullptr ? lerp(bottom[c0 + c], bottom[c1 + c], dx) : v1;
        out[c] = static_cast<uint8_t>(lerp(v1, v2, dy));
      }
    }
  }
}

// Image.transpose(ROTATE_90 / 180 / 270) of a square (90, 270) or any (180) image.
void pil_transpose(const uint8_t* src, uint8_t* dst, int h, int w, int C, AffineOp::Kind kind) {
  const int64_t row = static_cast<int64_t>(w) * C;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      int sy = y, sx = x;
      if (kind == AffineOp::kRotate90) {  // counter-clockwise: out[y][x] = in[x][w - 1 - y]
        sy = x;
        sx = w - 1 - y;
      } else if (kind == AffineOp::kRotate180) {
        sy = h - 1 - y;
        sx = w - 1 - x;
      } else if (kind == AffineOp::kRotate270) {
        sy = h - 1 - x;
        sx = y;
      }
      std::memcpy(dst + y * row + static_cast<int64_t>(x) * C, src + sy * row + static_cast<int64_t>(sx) * C, C);
    }
  }
}

void apply_table(uint8_t* pixels, int64_t values, int C, const uint8_t (*tables)[256]) {
  for (int64_t i = 0; i < values; i += C)
    for (int c = 0; c < C; ++c) pixels[i + c] = tables[c][pixels[i + c]];
}

// Pillow's blend (color::pil_blend) of every value with its degenerate, four a step.
void pil_blend_values(uint8_t* pixels, const uint8_t* degenerate, int64_t n, float alpha) {
  using augment::Float4;
  const Float4 a = {alpha, alpha, alpha, alpha}, zero = {0, 0, 0, 0}, top = {255, 255, 255, 255};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const Float4 d = augment::load4(degenerate + i);
    Float4 t = d + augment::mul4(a, augment::load4(pixels + i) - d);  // the difference of integers: exact
    t = t > zero ? t : zero;
    t = t < top ? t : top;
    const augment::Int4 v = __builtin_convertvector(t, augment::Int4);
    for (int k = 0; k < 4; ++k) pixels[i + k] = static_cast<uint8_t>(v[k]);
  }
  for (; i < n; ++i) pixels[i] = color::pil_blend(degenerate[i], pixels[i], alpha);
}

// ImageEnhance.Sharpness: blend with ImageFilter.SMOOTH of the image (its border pixels
// unfiltered; an image under 3x3 is its own SMOOTH, so nothing changes). SMOOTH's exact
// sums are 0.5 + multiples of 1/13, never within float error of an integer, so Filter.c's
// truncation gives the same value in any summation order: four values a step here.
void pil_sharpness(uint8_t* pixels, int h, int w, int C, float factor) {
  if (h < 3 || w < 3) return;
  using augment::Float4;
  using augment::at4;
  using augment::mul4;
  const int64_t row = static_cast<int64_t>(w) * C, n = static_cast<int64_t>(h) * row;
  thread_local std::vector<uint8_t> smooth;
  thread_local std::vector<float> values;
  smooth.assign(pixels, pixels + n);
  values.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = augment::kByteFloat[pixels[i]];
  const float e = aa::smooth_edge_weight(), m = aa::smooth_centre_weight();
  const Float4 edge = {e, e, e, e}, centre = {m, m, m, m}, half = {0.5f, 0.5f, 0.5f, 0.5f};
  const Float4 top = {255, 255, 255, 255};
  for (int y = 1; y < h - 1; ++y) {
    const float* above = values.data() + (y - 1) * row;
    const float* line = values.data() + y * row;
    const float* below = values.data() + (y + 1) * row;
    uint8_t* out = smooth.data() + y * row;
    int64_t i = C;
    for (; i + 4 <= row - C; i += 4) {
      Float4 s = half + ((mul4(at4(below + i - C), edge) + mul4(at4(below + i), edge)) + mul4(at4(below + i + C), edge));
      s += (mul4(at4(line + i - C), edge) + mul4(at4(line + i), centre)) + mul4(at4(line + i + C), edge);
      s += (mul4(at4(above + i - C), edge) + mul4(at4(above + i), edge)) + mul4(at4(above + i + C), edge);
      s = s < top ? s : top;
      const augment::Int4 v = __builtin_convertvector(s, augment::Int4);
      for (int k = 0; k < 4; ++k) out[i + k] = static_cast<uint8_t>(v[k]);
    }
    for (; i < row - C; ++i) out[i] = aa::smooth_value(pixels + (y - 1) * row, pixels + y * row, pixels + (y + 1) * row,
                                                       static_cast<int>(i), C);
  }
  pil_blend_values(pixels, smooth.data(), n, factor);
}

void channel_histograms(const uint8_t* pixels, int64_t values, int C, uint32_t (*histograms)[256]) {
  for (int c = 0; c < C; ++c) std::memset(histograms[c], 0, sizeof histograms[c]);
  for (int64_t i = 0; i < values; i += C)
    for (int c = 0; c < C; ++c) ++histograms[c][pixels[i + c]];
}

}  // namespace

void auto_augment_step(uint8_t* pixels, int h, int w, int C, int op, double magnitude, const uint8_t* fill,
                       bool bilinear) {
  const int64_t n = static_cast<int64_t>(h) * w * C;
  // ImageEnhance's factor as Pillow's blend takes it: 1 + magnitude, narrowed to float.
  const float factor = static_cast<float>(1.0 + magnitude);
  uint8_t tables[3][256];
  uint32_t histograms[3][256];
  if (aa::op_is_affine(op)) {
    const AffineOp affine = affine_op(op, magnitude, w, h);
    if (affine.kind == AffineOp::kCopy) return;
    thread_local std::vector<uint8_t> source;
    source.assign(pixels, pixels + n);
    if (affine.kind == AffineOp::kMatrix && bilinear)
      pil_affine_bilinear(source.data(), pixels, h, w, C, affine.matrix, fill);
    else if (affine.kind == AffineOp::kMatrix)
      pil_affine(source.data(), pixels, h, w, C, affine.matrix, fill);
    else
      pil_transpose(source.data(), pixels, h, w, C, affine.kind);
    return;
  }
  switch (op) {
    case aa::kBrightness:  // a blend with a fixed degenerate: one table for every value
      for (int v = 0; v < 256; ++v) tables[0][v] = color::pil_blend(0, static_cast<uint8_t>(v), factor);
      for (int64_t i = 0; i < n; ++i) pixels[i] = tables[0][pixels[i]];
      return;
    case aa::kColor: {  // a blend with each pixel's "L" (an "L" image is its own)
      if (C != 3) return;
      thread_local std::vector<uint8_t> grey;
      grey.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; i += 3) grey[i] = grey[i + 1] = grey[i + 2] = color::pil_luma(pixels + i, 3);
      pil_blend_values(pixels, grey.data(), n, factor);
      return;
    }
    case aa::kContrast: {
      uint64_t luma = 0;
      for (int64_t i = 0; i < n; i += C) luma += color::pil_luma(pixels + i, C);
      const int mean = color::pil_contrast_mean(luma, static_cast<int64_t>(h) * w);
      for (int v = 0; v < 256; ++v)
        tables[0][v] = color::pil_blend(static_cast<uint8_t>(mean), static_cast<uint8_t>(v), factor);
      for (int64_t i = 0; i < n; ++i) pixels[i] = tables[0][pixels[i]];
      return;
    }
    case aa::kSharpness:
      pil_sharpness(pixels, h, w, C, factor);
      return;
    case aa::kPosterize: {
      const int bits = static_cast<int>(magnitude);
      for (int v = 0; v < 256; ++v) tables[0][v] = aa::posterize(static_cast<uint8_t>(v), bits);
      for (int64_t i = 0; i < n; ++i) pixels[i] = tables[0][pixels[i]];
      return;
    }
    case aa::kSolarize:
      for (int v = 0; v < 256; ++v) tables[0][v] = aa::solarize(static_cast<uint8_t>(v), magnitude);
      for (int64_t i = 0; i < n; ++i) pixels[i] = tables[0][pixels[i]];
      return;
    case aa::kInvert:
      for (int64_t i = 0; i < n; ++i) pixels[i] = static_cast<uint8_t>(255 - pixels[i]);
      return;
    case aa::kAutoContrast:
    case aa::kEqualize:
      channel_histograms(pixels, n, C, histograms);
      for (int c = 0; c < C; ++c) {
        if (op == aa::kAutoContrast)
          aa::autocontrast_table(histograms[c], tables[c]);
        else
          aa::equalize_table(histograms[c], tables[c]);
      }
      apply_table(pixels, n, C, tables);
      return;
    default:  // kIdentity
      return;
  }
}

void auto_augment_uint8(const aa::AugmentRecord& record, uint8_t* pixels, int h, int w, int C) {
  for (int k = 0; k < record.count && k < aa::kMaxSteps; ++k)
    auto_augment_step(pixels, h, w, C, record.steps[k].op, record.steps[k].magnitude, record.fill,
                      record.bilinear != 0);
}

void check_op_ids(const char* op, at::IntArrayRef ops) {
  for (const int64_t id : ops)
    FASTLOAD_CHECK_VALUE(id >= 0 && id < aa::kOpCount, op, "expected op ids in [0, ", int(aa::kOpCount),
                         ") (fastload.augment.autoaugment.OPS), got ", id, " in ", ops, ".");
}

void check_augment_image(const char* op, const at::Tensor& image) {
  FASTLOAD_CHECK_VALUE(image.dim() == 3 && image.scalar_type() == at::kByte && image.device().is_cpu() &&
                           (image.size(2) == 1 || image.size(2) == 3),
                       op, "expected a uint8 HWC image [H, W, 1 or 3] on the CPU, got ", image.scalar_type(),
                       " of shape ", image.sizes(), " on ", image.device(), ".");
  FASTLOAD_CHECK_VALUE(image.size(0) > 0 && image.size(1) > 0 && image.size(0) <= INT32_MAX &&
                           image.size(1) * image.size(2) <= INT32_MAX,
                       op, "expected a non-empty image with rows under 2^31 bytes, got shape ", image.sizes(), ".");
}

int64_t check_augment_space(const char* op, const at::Tensor& indices, at::IntArrayRef space_ops,
                            at::ArrayRef<double> magnitudes) {
  FASTLOAD_CHECK_VALUE(indices.dim() == 1 && indices.scalar_type() == at::kLong, op,
                       "expected int64 sample indices [N], got ", indices.scalar_type(), " of shape ",
                       indices.sizes(), ".");
  check_op_ids(op, space_ops);
  FASTLOAD_CHECK_VALUE(!space_ops.empty() && !magnitudes.empty() && magnitudes.size() % space_ops.size() == 0, op,
                       "expected magnitudes [space_ops x bins], got ", magnitudes.size(), " for ", space_ops.size(),
                       " ops.");
  return static_cast<int64_t>(magnitudes.size() / space_ops.size());
}

namespace {

constexpr const char* kOp = "auto_augment";
constexpr const char* kParamsOp = "auto_augment_params";

// torchvision's _apply_op(img, op, magnitude) on a PIL image, for each (op, magnitude) in
// order, of a uint8 HWC image [H, W, 1 or 3]; fill: the affine ops' fill ([] = 0);
// bilinear: the affine ops' interpolation BILINEAR (else NEAREST).
at::Tensor auto_augment_op(const at::Tensor& image, at::IntArrayRef ops, at::ArrayRef<double> magnitudes,
                           at::IntArrayRef fill, bool bilinear) {
  check_augment_image(kOp, image);
  const int64_t H = image.size(0), W = image.size(1), C = image.size(2);
  FASTLOAD_CHECK_VALUE(ops.size() == magnitudes.size(), kOp, "expected one magnitude per op, got ", ops.size(),
                       " ops and ", magnitudes.size(), " magnitudes.");
  check_op_ids(kOp, ops);
  FASTLOAD_CHECK_VALUE(fill.empty() || fill.size() == 1 || static_cast<int64_t>(fill.size()) == C, kOp,
                       "The number of elements in 'fill' does not match the number of channels of the image (",
                       fill.size(), " != ", C, ")");
  uint8_t fill_bytes[3] = {0, 0, 0};
  for (int c = 0; c < C; ++c)
    fill_bytes[c] = fill.empty() ? 0 : static_cast<uint8_t>(std::clamp<int64_t>(fill[fill.size() == 1 ? 0 : c], 0, 255));
  for (size_t k = 0; k < ops.size(); ++k) {
    if (ops[k] == aa::kPosterize) {
      FASTLOAD_CHECK_VALUE(std::isfinite(magnitudes[k]) && static_cast<int>(magnitudes[k]) >= 1 &&
                               static_cast<int>(magnitudes[k]) <= 8,
                           kOp, "bits must be between or equal to 1 and 8, got ", magnitudes[k], " (Posterize).");
    }
    FASTLOAD_CHECK_VALUE(aa::magnitude_valid(magnitudes[k]), kOp, "expected finite magnitudes within +-",
                         aa::kMaxMagnitude, ", got ", magnitudes[k], ".");
  }
  at::Tensor out = image.contiguous().clone();
  for (size_t k = 0; k < ops.size(); ++k)
    auto_augment_step(out.data_ptr<uint8_t>(), static_cast<int>(H), static_cast<int>(W), static_cast<int>(C),
                      static_cast<int>(ops[k]), magnitudes[k], fill_bytes, bilinear);
  return out;
}

// The ops and signed magnitudes samples `indices` draw: (int64 [N, num_ops], float64
// [N, num_ops]). space_ops: the augmentation space's op ids; magnitudes: [space_ops x
// bins]; magnitude_bin -1 draws a bin per op (TrivialAugmentWide), else RandAugment's.
// With policy_ops (AutoAugment's sub-policies: indices into space_ops, [policies x 2],
// with policy_probs and policy_bins, -1: None) the draws are AutoAugment's, [N, 2] by
// the sub-policy's slots, op -1 (magnitude 0) where that op was not applied.
std::tuple<at::Tensor, at::Tensor> auto_augment_params_op(const at::Tensor& indices, int64_t seed, int64_t epoch,
                                                          at::IntArrayRef space_ops, at::ArrayRef<double> magnitudes,
                                                          int64_t num_ops, int64_t magnitude_bin,
                                                          at::IntArrayRef policy_ops, at::ArrayRef<double> policy_probs,
                                                          at::IntArrayRef policy_bins) {
  const int64_t bins = check_augment_space(kParamsOp, indices, space_ops, magnitudes);
  const bool policy = !policy_ops.empty() || !policy_probs.empty() || !policy_bins.empty();
  if (policy) {
    const size_t rows = policy_ops.size();
    FASTLOAD_CHECK_VALUE(rows > 0 && rows % aa::kPolicySteps == 0 && policy_probs.size() == rows &&
                             policy_bins.size() == rows,
                         kParamsOp, "expected policy_ops, policy_probs and policy_bins as [policies x ",
                         aa::kPolicySteps, "] values each, got ", policy_ops.size(), ", ", policy_probs.size(), " and ",
                         policy_bins.size(), ".");
    for (size_t k = 0; k < rows; ++k) {
      FASTLOAD_CHECK_VALUE(policy_ops[k] >= 0 && policy_ops[k] < static_cast<int64_t>(space_ops.size()), kParamsOp,
                           "expected policy_ops as indices into space_ops [0, ", space_ops.size(), "), got ",
                           policy_ops[k], ".");
      FASTLOAD_CHECK_VALUE(std::isfinite(policy_probs[k]) && policy_probs[k] >= 0 && policy_probs[k] <= 1, kParamsOp,
                           "expected policy_probs in [0, 1], got ", policy_probs[k], ".");
      FASTLOAD_CHECK_VALUE(policy_bins[k] >= -1 && policy_bins[k] < bins, kParamsOp,
                           "expected policy_bins -1 (None) or in [0, ", bins, "), got ", policy_bins[k], ".");
    }
    num_ops = aa::kPolicySteps;
  } else {
    FASTLOAD_CHECK_VALUE(num_ops >= 1 && num_ops <= aa::kMaxSteps, kParamsOp, "expected num_ops in [1, ",
                         aa::kMaxSteps, "], got ", num_ops, ".");
    FASTLOAD_CHECK_VALUE(magnitude_bin >= -1 && magnitude_bin < bins, kParamsOp,
                         "expected magnitude_bin -1 or in [0, ", bins, "), got ", magnitude_bin, ".");
  }
  std::vector<int32_t> ops32(space_ops.begin(), space_ops.end());
  const std::vector<int32_t> policy_ops32(policy_ops.begin(), policy_ops.end());
  const std::vector<int32_t> policy_bins32(policy_bins.begin(), policy_bins.end());
  aa::AugmentSpace space{ops32.data(), magnitudes.data(), static_cast<int>(ops32.size()), static_cast<int>(bins),
                         static_cast<int>(num_ops), static_cast<int>(magnitude_bin)};
  if (policy) {
    space.policies = static_cast<int>(policy_ops32.size()) / aa::kPolicySteps;
    space.policy_ops = policy_ops32.data();
    space.policy_probs = policy_probs.data();
    space.policy_bins = policy_bins32.data();
  }
  const at::Tensor idx = indices.contiguous();
  const int64_t N = idx.size(0);
  at::Tensor ops_out = at::full({N, num_ops}, -1, idx.options());
  at::Tensor magnitudes_out = at::zeros({N, num_ops}, idx.options().dtype(at::kDouble));
  const uint8_t fill[3] = {0, 0, 0};
  for (int64_t i = 0; i < N; ++i) {
    const aa::AugmentRecord r = aa::auto_augment_draw(space, fill, seed, epoch, idx.data_ptr<int64_t>()[i]);
    for (int k = 0; k < r.count; ++k) {
      const int64_t slot = r.steps[k].slot;
      ops_out.data_ptr<int64_t>()[i * num_ops + slot] = r.steps[k].op;
      magnitudes_out.data_ptr<double>()[i * num_ops + slot] = r.steps[k].magnitude;
    }
  }
  return {ops_out, magnitudes_out};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) {
  m.impl("auto_augment", &auto_augment_op);
  m.impl("auto_augment_params", &auto_augment_params_op);
}

}  // namespace fastload
