// A plan: the fused decode + augment of one loader, fixed for its lifetime.
//
// Python (fastload/augment/plan.py) reduces a list of transforms (RandomResizedCrop,
// Resize, CenterCrop, RandomHorizontalFlip, RandomVerticalFlip, Normalize, ToDtype) to
// this canonical form
// and gets it as fastload._C.Plan (every field bound once, from FASTLOAD_PLAN_FIELDS);
// the engine applies it to every sample. Geometry is resolved per image
// (geometry.h region_of), once its header says how large it is.
#pragma once

#include <cstdint>
#include <vector>

#include "augment/color_pass.h"
#include "augment/geometry.h"

namespace fastload {

// Every field is also listed in FASTLOAD_PLAN_FIELDS below: the binding, its pickling
// and its repr are generated from that list.
struct Plan {
  Geometry geometry = Geometry::kRandomResizedCrop;
  int out_height = 224, out_width = 224;
  // RandomResizedCrop
  double scale_min = 0.08, scale_max = 1.0, ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  // Resize: resize_short > 0 resizes the shorter side to it (max_size caps the longer
  // side, <= 0: none); else to resize_height x resize_width; both <= 0: no resize.
  int resize_short = -1, resize_height = -1, resize_width = -1, max_size = -1;
  // RandomCrop: padding on each side, then pad_if_needed (torchvision's order), in
  // padding_mode (geometry.h PaddingMode); constant padding reads pad_fill (uint8, one
  // value or one per channel; empty: 0, the kernel's own padding).
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  bool pad_if_needed = false;
  int padding_mode = kPadConstant;
  std::vector<float> pad_fill{};
  Interpolation interpolation = Interpolation::kBilinear;  // of the one resize
  double flip_p = 0.0;    // left-right, drawn on ParamStream::kFlip
  double flip_v_p = 0.0;  // top-bottom, drawn on ParamStream::kFlipVertical
  float value_scale = 1.0f / 255.0f;  // value = (v * value_scale - mean) / std
  std::vector<float> mean{0.f, 0.f, 0.f}, std{1.f, 1.f, 1.f};
  int channels = 3;
  bool dct_scaling = true;  // false: never DCT-scale (outputs follow a full decode to rounding)
  int64_t max_pixels = 0;   // decompression-bomb limit of the decoder; <= 0: none
  int64_t seed = 0;
  // ColorJitter (PIL stage, after the resize): empty = none, else (min, max) of the
  // brightness, contrast, saturation and hue factors; an op whose range is exactly its
  // neutral point (1, 1) or, for hue, (0, 0) is off (torchvision's None).
  std::vector<double> jitter{};
  double jitter_p = 1.0;  // RandomApply([ColorJitter], p): p, drawn on ParamStream::kJitterApply
  double grayscale_p = 0.0;  // RandomGrayscale (1: Grayscale(3)), drawn on ParamStream::kGrayscale
  // RandomErasing on the normalised output: p, torchvision's scale and ratio ranges, and
  // the value: erase_value (one, or one per channel), or random standard normals
  // (erase_random 1: one per element, torchvision's value="random"; 2: one per channel,
  // timm's mode="rand").
  double erase_p = 0.0;
  double erase_scale_min = 0.02, erase_scale_max = 0.33, erase_ratio_min = 0.3, erase_ratio_max = 3.3;
  std::vector<float> erase_value{0.f};
  int erase_random = 0;
  // GaussianBlur (PIL stage, after the colour ops): odd kernel sizes (x, y), 0: none;
  // sigma drawn uniformly in [min, max] per sample on ParamStream::kBlur.
  int blur_kernel_x = 0, blur_kernel_y = 0;
  double blur_sigma_min = 0.1, blur_sigma_max = 2.0;
  double blur_p = 1.0;  // RandomApply([GaussianBlur], p): p, drawn on ParamStream::kBlurApply
  // TrivialAugmentWide / RandAugment / AutoAugment (PIL stage, last): the augmentation space's op ids
  // (autoaugment.h AugmentOp, torchvision's order; empty: none) and their magnitudes
  // [ops x bins] (torchvision's tables, zeros for ops without); augment_num_ops ops per
  // sample, at bin augment_magnitude_bin (-1: drawn per op, TrivialAugmentWide); the
  // affine ops' fill (uint8, one value or one per channel; empty: 0). Drawn on
  // ParamStream::kAutoAugment.
  std::vector<int> augment_ops{};
  std::vector<double> augment_magnitudes{};
  int augment_num_ops = 1;
  int augment_magnitude_bin = -1;
  std::vector<float> augment_fill{};
  bool augment_bilinear = false;  // the affine ops' interpolation: BILINEAR (else NEAREST)
  // AutoAugment: its sub-policies, kPolicySteps (autoaugment.h) rows each, [policies x 2]
  // (empty: TrivialAugmentWide / RandAugment): the op as an index into augment_ops, its
  // probability, and its bin of augment_magnitudes (-1: torchvision's None, magnitude 0).
  // augment_num_ops and augment_magnitude_bin are then unused.
  std::vector<int> augment_policy_ops{};
  std::vector<double> augment_policy_probs{};
  std::vector<int> augment_policy_bins{};
  // AugMix (PIL stage, last; torchvision's tensor-path ops): its space's op ids and
  // magnitudes [ops x bins] (empty: none), severity (bins drawn from [0, severity)),
  // mixture_width, chain_depth (<= 0: 1..3 drawn), alpha, and the affine ops' mode.
  // Drawn on ParamStream::kAugMix.
  std::vector<int> augmix_ops{};
  std::vector<double> augmix_magnitudes{};
  int augmix_severity = 3, augmix_width = 3, augmix_depth = -1;
  double augmix_alpha = 1.0;
  bool augmix_bilinear = true;

  // True when RandomCrop pads with something else than the kernel's zeros.
  bool pads_uint8() const {
    return geometry == Geometry::kRandomCrop && (padding_mode != kPadConstant || !pad_fill.empty());
  }
  bool blurs() const { return blur_kernel_x > 0 && blur_kernel_y > 0; }
  // True when the plan has an op of the fused uint8 stage (jitter, grayscale, erasing,
  // blur, padding other than zeros, TrivialAugmentWide / RandAugment / AutoAugment, AugMix).
  bool augments() const { return !augment_ops.empty() || !augmix_ops.empty(); }
  // True when the plan may resample to uint8 first (Pillow's 8-bit resample), for the
  // steps that work on uint8 pixels: all of the uint8 stage but RandomErasing.
  bool quantizes() const { return !jitter.empty() || grayscale_p > 0.0 || blurs() || pads_uint8() || augments(); }
  bool has_color() const { return quantizes() || erase_p > 0.0; }

  // Raises ValueError "fastload.<op>: expected ..." for a plan the engine cannot run
  // (channels, mean/std lengths, output size, scale/ratio ranges, Resize arguments).
  void validate(const char* op) const;
  void validate_color(const char* op) const;  // the colour fields, part of validate
  void validate_augment(const char* op) const;  // the TrivialAugmentWide / RandAugment / AutoAugment / AugMix fields
};

// Geometry of one sample: a pure function of (plan, image size, epoch, index), following
// torchvision's RandomResizedCrop sampler and Resize/CenterCrop arithmetic to the pixel.
// Throws GeometryError where torchvision would fail on that image.
Region region_of(const Plan& plan, int height, int width, int64_t epoch, int64_t index);

// Resize + CenterCrop's integer layout on a height x width image: the resized size and
// where the centre crop starts in it (negative: CenterCrop pads), torchvision's
// arithmetic (region_of's box is the same layout in source pixels). Throws
// GeometryError for a resize to 0 pixels, as region_of.
struct ResizedLayout {
  int64_t height, width, top, left;
};
ResizedLayout resized_layout(const Plan& plan, int height, int width);

// The colour ops of one sample, drawn from (plan.seed, epoch, index): what the fused pass
// applies to its out_height x out_width output.
augment::color::ColorPass color_pass_of(const Plan& plan, int64_t epoch, int64_t index);

#define FASTLOAD_PLAN_FIELDS(X)                                                                    \
  X(geometry) X(out_height) X(out_width) X(scale_min) X(scale_max) X(ratio_min) X(ratio_max)      \
  X(resize_short) X(resize_height) X(resize_width) X(max_size) X(pad_top) X(pad_left) X(pad_bottom)       \
  X(pad_right) X(pad_if_needed) X(interpolation) X(flip_p)                                                 \
  X(flip_v_p) X(value_scale) X(mean) X(std) X(channels) X(dct_scaling) X(max_pixels) X(seed)     \
  X(jitter) X(jitter_p) X(grayscale_p) X(erase_p) X(erase_scale_min) X(erase_scale_max) X(erase_ratio_min)             \
  X(erase_ratio_max) X(erase_value) X(erase_random) X(padding_mode) X(pad_fill) X(blur_kernel_x) X(blur_kernel_y)  \
  X(blur_sigma_min) X(blur_sigma_max) X(blur_p) X(augment_ops) X(augment_magnitudes) X(augment_num_ops)            \
  X(augment_magnitude_bin) X(augment_fill) X(augment_bilinear) X(augmix_ops) X(augmix_magnitudes)             \
  X(augmix_severity) X(augmix_width) X(augmix_depth) X(augmix_alpha) X(augmix_bilinear)                     \
  X(augment_policy_ops) X(augment_policy_probs) X(augment_policy_bins)

}  // namespace fastload
