// Per-image geometry of a plan, following torchvision's arithmetic to the pixel.
#include "engine/plan.h"

#include <cmath>
#include <sstream>
#include <string>

#include "augment/params.h"

namespace fastload::engine {
namespace {

// torchvision's _compute_resized_output_size, in int64: the longer side of a thin image
// resized by its shorter side can pass 2^31 (1 x 9,000,000 -> Resize(256): 2.3e9).
void resized_size(const Plan& plan, int height, int width, int64_t& new_height, int64_t& new_width) {
  if (plan.resize_short > 0) {
    const bool wide = width > height;
    const int64_t short_side = wide ? height : width;
    const int64_t long_side = wide ? width : height;
    int64_t new_short = plan.resize_short;
    // Python's int(a * b / c): an exact product, one correctly rounded division, truncation.
    int64_t new_long = static_cast<int64_t>(static_cast<double>(new_short * long_side) / short_side);
    if (plan.max_size > 0 && new_long > plan.max_size) {
      new_short = static_cast<int64_t>(static_cast<double>(plan.max_size * new_short) / new_long);
      new_long = plan.max_size;
    }
    new_height = wide ? new_short : new_long;
    new_width = wide ? new_long : new_short;
  } else if (plan.resize_height > 0) {
    new_height = plan.resize_height;
    new_width = plan.resize_width;
  } else {
    new_height = height;
    new_width = width;
  }
}

// torchvision's center_crop anchor: padded dimensions start at -padding.
int64_t center_crop_start(int64_t size, int64_t crop) {
  if (crop > size) return -((crop - size) / 2);
  return static_cast<int64_t>(std::rint((size - crop) / 2.0));
}

std::string size_text(int64_t height, int64_t width) { return std::to_string(height) + "x" + std::to_string(width); }

std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace

SourceRegion plan_region(const Plan& plan, int height, int width, int64_t epoch, int64_t index) {
  SourceRegion region;
  const Box image{0.f, 0.f, static_cast<float>(height), static_cast<float>(width)};
  if (plan.geometry == Geometry::kRandomResizedCrop) {
    SampleRng rng(plan.seed, epoch, index, ParamStream::kCrop);
    const CropBox crop = random_resized_crop_box(height, width, plan.scale_min, plan.scale_max,
                                                 plan.ratio_min, plan.ratio_max, rng);
    // Only the central fallback can be empty: a ratio range far from the image's own.
    if (crop.height <= 0 || crop.width <= 0) {
      throw GeometryError("fastload.RandomResizedCrop: expected a crop of at least 1x1 pixels, got " +
                          size_text(crop.height, crop.width) + " for a " + size_text(height, width) +
                          " image with ratio (" + number_text(plan.ratio_min) + ", " +
                          number_text(plan.ratio_max) + "). Use a ratio range that the images' aspect "
                          "ratios can meet");
    }
    region.box = {static_cast<float>(crop.top), static_cast<float>(crop.left),
                  static_cast<float>(crop.height), static_cast<float>(crop.width)};
    region.clamp = region.box;  // torchvision crops first, then resizes the crop
  } else {
    int64_t new_height, new_width;
    resized_size(plan, height, width, new_height, new_width);
    // torchvision's resize refuses a 0-pixel output too (interpolate, PIL): no pixels
    // to crop from. Never a box of inf/NaN, which would give an all-zero sample.
    if (new_height <= 0 || new_width <= 0) {
      throw GeometryError("fastload.Resize: expected a resized image of at least 1x1 pixels, got " +
                          size_text(new_height, new_width) + " for a " + size_text(height, width) +
                          " image (size " + std::to_string(plan.resize_short) + ", max_size " +
                          std::to_string(plan.max_size) + "). Raise max_size, or leave out such thin images");
    }
    const double sy = static_cast<double>(height) / new_height;
    const double sx = static_cast<double>(width) / new_width;
    const int64_t top = center_crop_start(new_height, plan.out_height);
    const int64_t left = center_crop_start(new_width, plan.out_width);
    region.box = {static_cast<float>(top * sy), static_cast<float>(left * sx),
                  static_cast<float>(plan.out_height * sy), static_cast<float>(plan.out_width * sx)};
    region.clamp = image;  // the whole image was resized, then cropped
  }
  if (plan.flip_p > 0.0) {
    SampleRng rng(plan.seed, epoch, index, ParamStream::kFlip);
    region.flip = random_flip(plan.flip_p, rng);
  }
  return region;
}

}  // namespace fastload::engine
