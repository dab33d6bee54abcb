// Plan validation: what the engine refuses once, up front, rather than per sample.
#include "augment/plan.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "check.h"

namespace fastload {

void Plan::validate(const char* op) const {
  FASTLOAD_CHECK_VALUE(channels == 1 || channels == 3, op, "expected 1 or 3 channels, got ", channels, ".");
  FASTLOAD_CHECK_VALUE(static_cast<int>(mean.size()) == channels && static_cast<int>(std.size()) == channels, op,
                       "expected one mean and std per channel, got ", mean.size(), " and ", std.size(), " for ",
                       channels, " channels.");
  FASTLOAD_CHECK_VALUE(out_height > 0 && out_width > 0, op, "expected a positive output size, got ", out_height, "x",
                       out_width, ".");
  FASTLOAD_CHECK_VALUE(std::isfinite(scale_min) && std::isfinite(scale_max) && 0 <= scale_min &&
                           scale_min <= scale_max && std::isfinite(ratio_min) && std::isfinite(ratio_max) &&
                           0 < ratio_min && ratio_min <= ratio_max,
                       op, "expected finite 0 <= scale_min <= scale_max and 0 < ratio_min <= ratio_max, got scale (",
                       scale_min, ", ", scale_max, "), ratio (", ratio_min, ", ", ratio_max, ").");
  // torchvision refuses this when resizing; the plan refuses it once, up front.
  FASTLOAD_CHECK_VALUE(max_size <= 0 || resize_short <= 0 || max_size > resize_short, op,
                       "expected max_size strictly greater than the requested size for the smaller edge, got "
                       "max_size = ", max_size, " and size = ", resize_short, ".");
  FASTLOAD_CHECK_VALUE(std::isfinite(flip_p) && std::isfinite(flip_v_p) && 0 <= flip_p && flip_p <= 1 &&
                           0 <= flip_v_p && flip_v_p <= 1,
                       op, "expected flip probabilities in [0, 1], got flip_p = ", flip_p, ", flip_v_p = ", flip_v_p,
                       ".");
  FASTLOAD_CHECK_VALUE(static_cast<int>(interpolation) >= 0 && static_cast<int>(interpolation) < kInterpolationCount,
                       op, "expected interpolation BILINEAR, BICUBIC, NEAREST or BILINEAR_NO_ANTIALIAS, got ",
                       static_cast<int>(interpolation), ".");
  FASTLOAD_CHECK_VALUE((resize_height > 0) == (resize_width > 0), op,
                       "expected both or neither of resize_height and resize_width, got ", resize_height, " and ",
                       resize_width, ".");
  FASTLOAD_CHECK_VALUE(pad_top >= 0 && pad_left >= 0 && pad_bottom >= 0 && pad_right >= 0, op,
                       "expected non-negative RandomCrop padding, got (top ", pad_top, ", left ", pad_left,
                       ", bottom ", pad_bottom, ", right ", pad_right, ").");
  FASTLOAD_CHECK_VALUE(padding_mode >= kPadConstant && padding_mode <= kPadSymmetric, op,
                       "expected padding_mode 0 (constant), 1 (edge), 2 (reflect) or 3 (symmetric), got ", padding_mode,
                       ".");
  FASTLOAD_CHECK_VALUE(pad_fill.empty() || pad_fill.size() == 1 || static_cast<int>(pad_fill.size()) == channels, op,
                       "The number of elements in 'fill' does not match the number of channels of the image (",
                       pad_fill.size(), " != ", channels, ").");
  for (const float f : pad_fill) {
    FASTLOAD_CHECK_VALUE(f >= 0 && f <= 255 && f == std::floor(f), op, "expected the RandomCrop fill as uint8 values "
                         "0 .. 255, got ", f, ".");
  }
  // The uint8 stage's padding and blur run on its Pillow-resampled buffer, which NEAREST
  // (its float path is Pillow's already) does not fill.
  FASTLOAD_CHECK_VALUE(!(blurs() || pads_uint8()) || interpolation != Interpolation::kNearest, op,
                       "expected GaussianBlur and RandomCrop's fill or padding_mode with BILINEAR or BICUBIC "
                       "interpolation, got NEAREST.");
  if (blurs()) {
    FASTLOAD_CHECK_VALUE(blur_kernel_x % 2 == 1 && blur_kernel_y % 2 == 1 &&
                             blur_kernel_x <= augment::blur::kMaxKernel && blur_kernel_y <= augment::blur::kMaxKernel,
                         op, "Kernel size value should be an odd and positive number (at most ",
                         augment::blur::kMaxKernel, "), got (", blur_kernel_x, ", ", blur_kernel_y, ").");
    FASTLOAD_CHECK_VALUE(std::isfinite(blur_sigma_min) && std::isfinite(blur_sigma_max) && 0 < blur_sigma_min &&
                             blur_sigma_min <= blur_sigma_max,
                         op, "sigma values should be positive and of the form (min, max), got (", blur_sigma_min, ", ",
                         blur_sigma_max, ").");
    FASTLOAD_CHECK_VALUE(std::isfinite(blur_p) && blur_p >= 0 && blur_p <= 1, op,
                         "expected blur_p (the RandomApply probability of GaussianBlur) in [0, 1], got ", blur_p, ".");
    // torch's reflect padding of kernel_size // 2 on the out_height x out_width sample.
    FASTLOAD_CHECK_VALUE(blur_kernel_x / 2 < out_width && blur_kernel_y / 2 < out_height, op,
                         "Padding size should be less than the corresponding input dimension: GaussianBlur's kernel "
                         "(", blur_kernel_x, ", ", blur_kernel_y, ") on the ", out_height, "x", out_width,
                         " output. Use a kernel_size below twice the output's sides.");
  }
  validate_augment(op);
  validate_color(op);
}

namespace {

// torchvision's neutral point of each ColorJitter op: a range of exactly it is None.
constexpr double kJitterCentre[4] = {1.0, 1.0, 1.0, 0.0};
constexpr const char* kJitterNames[4] = {"brightness", "contrast", "saturation", "hue"};

}  // namespace

void Plan::validate_color(const char* op) const {
  FASTLOAD_CHECK_VALUE(jitter.empty() || jitter.size() == 8, op,
                       "expected jitter as 8 values ((min, max) of brightness, contrast, saturation, hue) or none, "
                       "got ", jitter.size(), " values.");
  for (size_t k = 0; k < jitter.size() / 2; ++k) {
    const double low = jitter[2 * k], high = jitter[2 * k + 1];
    const double lowest = k == 3 ? -0.5 : 0.0, highest = k == 3 ? 0.5 : INFINITY;
    FASTLOAD_CHECK_VALUE(std::isfinite(low) && std::isfinite(high) && lowest <= low && low <= high &&
                             high <= highest,
                         op, "expected the ColorJitter ", kJitterNames[k], " range (min, max) with ", lowest,
                         " <= min <= max <= ", highest, ", got (", low, ", ", high, ").");
  }
  FASTLOAD_CHECK_VALUE(std::isfinite(grayscale_p) && std::isfinite(erase_p) && erase_p >= 0 && erase_p <= 1, op,
                       "expected finite grayscale_p and erase_p in [0, 1], got ", grayscale_p, " and ", erase_p,
                       ".");
  FASTLOAD_CHECK_VALUE(std::isfinite(jitter_p) && jitter_p >= 0 && jitter_p <= 1, op,
                       "expected jitter_p (the RandomApply probability of ColorJitter) in [0, 1], got ", jitter_p, ".");
  if (erase_p <= 0) return;
  FASTLOAD_CHECK_VALUE(std::isfinite(erase_scale_min) && std::isfinite(erase_scale_max) && 0 <= erase_scale_min &&
                           erase_scale_min <= erase_scale_max && erase_scale_max <= 1 &&
                           std::isfinite(erase_ratio_min) && std::isfinite(erase_ratio_max) &&
                           0 < erase_ratio_min && erase_ratio_min <= erase_ratio_max,
                       op, "expected RandomErasing scale 0 <= min <= max <= 1 and ratio 0 < min <= max, got scale (",
                       erase_scale_min, ", ", erase_scale_max, "), ratio (", erase_ratio_min, ", ", erase_ratio_max,
                       ").");
  FASTLOAD_CHECK_VALUE(erase_random >= 0 && erase_random <= 2, op,
                       "expected erase_random 0 (erase_value), 1 (a normal per element) or 2 (per channel), got ",
                       erase_random, ".");
  FASTLOAD_CHECK_VALUE(erase_random != 0 || erase_value.size() == 1 || static_cast<int>(erase_value.size()) == channels,
                       op, "If value is a sequence, it should have either a single value or ", channels,
                       " (number of input channels), got ", erase_value.size(), " values.");
}

namespace {

// An augmentation space's fields "<name>_ops" (AugmentOp ids) and "<name>_magnitudes"
// ([ops x bins], finite within +-kMaxMagnitude, Posterize's bits in [min_bits, 8]): its bins.
int check_space(const char* op, const char* name, const std::vector<int>& ops, const std::vector<double>& magnitudes,
                int min_bits) {
  namespace aa = augment::autoaugment;
  for (const int id : ops)
    FASTLOAD_CHECK_VALUE(id >= 0 && id < aa::kOpCount, op, "expected ", name, "_ops ids in [0, ", int(aa::kOpCount),
                         ") (fastload.augment.autoaugment.OPS), got ", id, ".");
  FASTLOAD_CHECK_VALUE(!magnitudes.empty() && magnitudes.size() % ops.size() == 0, op, "expected ", name,
                       "_magnitudes as [", ops.size(), " ops x bins] values, got ", magnitudes.size(), ".");
  const int bins = static_cast<int>(magnitudes.size() / ops.size());
  for (size_t k = 0; k < magnitudes.size(); ++k) {
    const double m = magnitudes[k];
    FASTLOAD_CHECK_VALUE(aa::magnitude_valid(m), op, "expected finite ", name, "_magnitudes within +-",
                         aa::kMaxMagnitude, ", got ", m, ".");
    FASTLOAD_CHECK_VALUE(ops[k / bins] != aa::kPosterize || (m >= min_bits && m < 9), op,
                         "Posterize's bits must be between or equal to ", min_bits, " and 8, got ", m, ".");
  }
  return bins;
}

}  // namespace

void Plan::validate_augment(const char* op) const {
  namespace aa = augment::autoaugment;
  if (!augmix_ops.empty()) {
    const int bins = check_space(op, "augmix", augmix_ops, augmix_magnitudes, 0);  // AugMix's tensor posterize: 0 too
    FASTLOAD_CHECK_VALUE(augmix_severity >= 1 && augmix_severity <= bins, op, "expected augmix_severity in [1, ", bins,
                         "], got ", augmix_severity, ".");
    FASTLOAD_CHECK_VALUE(augmix_width >= 1 && augmix_width <= augment::augmix::kMaxChains &&
                             augmix_depth <= augment::augmix::kMaxDepth,
                         op, "expected augmix_width in [1, ", augment::augmix::kMaxChains, "] and augmix_depth at most ",
                         augment::augmix::kMaxDepth, ", got ", augmix_width, " and ", augmix_depth, ".");
    FASTLOAD_CHECK_VALUE(std::isfinite(augmix_alpha) && augmix_alpha > 0, op, "expected augmix_alpha > 0, got ",
                         augmix_alpha, ".");
    FASTLOAD_CHECK_VALUE(augment_ops.empty(), op, "expected one of TrivialAugmentWide / RandAugment and AugMix, got both.");
  }
  if (augment_ops.empty()) {
    FASTLOAD_CHECK_VALUE(augment_policy_ops.empty() && augment_policy_probs.empty() && augment_policy_bins.empty(), op,
                         "expected augment_ops (AutoAugment's space) with augment_policy_ops / _probs / _bins, got "
                         "sub-policies without a space.");
    return;
  }
  const int bins = check_space(op, "augment", augment_ops, augment_magnitudes, 1);  // ImageOps.posterize: 1 to 8
  FASTLOAD_CHECK_VALUE(augment_num_ops >= 1 && augment_num_ops <= aa::kMaxSteps, op, "expected augment_num_ops in [1, ",
                       aa::kMaxSteps, "] (RandAugment's num_ops), got ", augment_num_ops, ".");
  FASTLOAD_CHECK_VALUE(augment_magnitude_bin >= -1 && augment_magnitude_bin < bins, op,
                       "expected augment_magnitude_bin -1 (drawn) or in [0, ", bins, "), got ", augment_magnitude_bin,
                       ".");
  FASTLOAD_CHECK_VALUE(augment_fill.empty() || augment_fill.size() == 1 ||
                           static_cast<int>(augment_fill.size()) == channels,
                       op, "The number of elements in 'fill' does not match the number of channels of the image (",
                       augment_fill.size(), " != ", channels, ")");
  if (augment_policy_ops.empty() && augment_policy_probs.empty() && augment_policy_bins.empty()) return;
  const size_t rows = augment_policy_ops.size();
  FASTLOAD_CHECK_VALUE(rows > 0 && rows % aa::kPolicySteps == 0 && augment_policy_probs.size() == rows &&
                           augment_policy_bins.size() == rows,
                       op, "expected augment_policy_ops, augment_policy_probs and augment_policy_bins as [policies x ",
                       aa::kPolicySteps, "] values each (AutoAugment's sub-policies), got ", augment_policy_ops.size(),
                       ", ", augment_policy_probs.size(), " and ", augment_policy_bins.size(), ".");
  for (size_t k = 0; k < rows; ++k) {
    const int index = augment_policy_ops[k], bin = augment_policy_bins[k];
    const double p = augment_policy_probs[k];
    FASTLOAD_CHECK_VALUE(index >= 0 && index < static_cast<int>(augment_ops.size()), op,
                         "expected augment_policy_ops as indices into augment_ops [0, ", augment_ops.size(), "), got ",
                         index, " in sub-policy ", k / aa::kPolicySteps, ".");
    FASTLOAD_CHECK_VALUE(std::isfinite(p) && p >= 0 && p <= 1, op, "expected augment_policy_probs in [0, 1], got ", p,
                         " in sub-policy ", k / aa::kPolicySteps, ".");
    FASTLOAD_CHECK_VALUE(bin >= -1 && bin < bins, op, "expected augment_policy_bins -1 (None) or in [0, ", bins,
                         "), got ", bin, " in sub-policy ", k / aa::kPolicySteps, ".");
    FASTLOAD_CHECK_VALUE(augment_ops[index] != aa::kPosterize || bin >= 0, op,
                         "expected a bin for Posterize (its bits), got None in sub-policy ", k / aa::kPolicySteps, ".");
  }
}

augment::color::ColorPass color_pass_of(const Plan& plan, int64_t epoch, int64_t index) {
  augment::color::ColorPass cp;
  for (int k = 0; k < 4; ++k) cp.jitter_params.order[k] = k;  // a valid record without jitter too
  if (plan.jitter.size() == 8) {
    augment::color::JitterRanges ranges;
    for (int k = 0; k < 4; ++k) {
      ranges.min[k] = plan.jitter[2 * k];
      ranges.max[k] = plan.jitter[2 * k + 1];
      ranges.enabled[k] = !(ranges.min[k] == kJitterCentre[k] && ranges.max[k] == kJitterCentre[k]);
    }
    ranges.p = plan.jitter_p;
    cp.jitter_params = augment::color::color_jitter_params(ranges, plan.seed, epoch, index);
    cp.jitter = true;
  }
  cp.grayscale = plan.grayscale_p > 0.0 && augment::color::random_grayscale(plan.grayscale_p, plan.seed, epoch, index);
  if (plan.erase_p > 0.0) {
    cp.erase = augment::color::random_erasing_box(plan.out_height, plan.out_width, plan.erase_p, plan.erase_scale_min,
                                                  plan.erase_scale_max, plan.erase_ratio_min, plan.erase_ratio_max,
                                                  plan.seed, epoch, index);
    if (plan.erase_random != 0) {
      cp.erase_values = plan.erase_random == 2 ? -1 : 0;
      cp.erase_rng = augment::color::erase_value_rng(plan.seed, epoch, index);
    } else {
      cp.erase_values = static_cast<int>(std::min<size_t>(plan.erase_value.size(), 3));
      for (int c = 0; c < cp.erase_values; ++c) cp.erase_value[c] = plan.erase_value[c];
    }
  }
  if (plan.pads_uint8()) {
    cp.pad.on = true;
    cp.pad.mode = plan.padding_mode;
    for (int c = 0; c < 3; ++c) {
      const float f = plan.pad_fill.empty() ? 0.f : plan.pad_fill[plan.pad_fill.size() == 1 ? 0 : std::min<size_t>(c, plan.pad_fill.size() - 1)];
      cp.pad.fill[c] = static_cast<uint8_t>(std::clamp(f, 0.f, 255.f));
    }
  }
  if (plan.blurs()) {
    const float sigma =
        augment::blur::gaussian_blur_sigma(plan.blur_sigma_min, plan.blur_sigma_max, plan.seed, epoch, index, plan.blur_p);
    if (!std::isnan(sigma)) {  // NaN: RandomApply skips this sample's blur
      cp.blur.kernel_x = plan.blur_kernel_x;
      cp.blur.kernel_y = plan.blur_kernel_y;
      cp.blur.sigma = sigma;
    }
  }
  if (!plan.augment_ops.empty()) {
    const std::vector<int32_t> ops(plan.augment_ops.begin(), plan.augment_ops.end());
    const int space_ops = static_cast<int>(ops.size());
    augment::autoaugment::AugmentSpace space{ops.data(), plan.augment_magnitudes.data(), space_ops,
                                             static_cast<int>(plan.augment_magnitudes.size()) / space_ops,
                                             plan.augment_num_ops, plan.augment_magnitude_bin, plan.augment_bilinear};
    const std::vector<int32_t> policy_ops(plan.augment_policy_ops.begin(), plan.augment_policy_ops.end());
    const std::vector<int32_t> policy_bins(plan.augment_policy_bins.begin(), plan.augment_policy_bins.end());
    if (!policy_ops.empty()) {  // AutoAugment
      space.policies = static_cast<int>(policy_ops.size()) / augment::autoaugment::kPolicySteps;
      space.policy_ops = policy_ops.data();
      space.policy_probs = plan.augment_policy_probs.data();
      space.policy_bins = policy_bins.data();
    }
    uint8_t fill[3] = {0, 0, 0};
    for (int c = 0; c < 3 && !plan.augment_fill.empty(); ++c)
      fill[c] = static_cast<uint8_t>(
          std::clamp(plan.augment_fill[plan.augment_fill.size() == 1 ? 0 : std::min<size_t>(c, plan.augment_fill.size() - 1)],
                     0.f, 255.f));
    cp.augment = augment::autoaugment::auto_augment_draw(space, fill, plan.seed, epoch, index);
  }
  if (!plan.augmix_ops.empty()) {
    const std::vector<int32_t> ops(plan.augmix_ops.begin(), plan.augmix_ops.end());
    const int space_ops = static_cast<int>(ops.size());
    const augment::augmix::AugMixSpace space{ops.data(), plan.augmix_magnitudes.data(), space_ops,
                                             static_cast<int>(plan.augmix_magnitudes.size()) / space_ops,
                                             plan.augmix_severity, plan.augmix_width, plan.augmix_depth,
                                             plan.augmix_alpha, plan.augmix_bilinear};
    cp.augmix = augment::augmix::augmix_draw(space, plan.seed, epoch, index);
  }
  return cp;
}

}  // namespace fastload
