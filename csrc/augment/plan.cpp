// Plan validation: what the engine refuses once, up front, rather than per sample.
#include "augment/plan.h"

#include <cmath>

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
  FASTLOAD_CHECK_VALUE(interpolation == Interpolation::kBilinear || interpolation == Interpolation::kBicubic ||
                           interpolation == Interpolation::kNearest,
                       op, "expected interpolation BILINEAR, BICUBIC or NEAREST, got ", static_cast<int>(interpolation),
                       ".");
  FASTLOAD_CHECK_VALUE((resize_height > 0) == (resize_width > 0), op,
                       "expected both or neither of resize_height and resize_width, got ", resize_height, " and ",
                       resize_width, ".");
}

}  // namespace fastload
