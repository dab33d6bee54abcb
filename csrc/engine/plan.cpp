// Per-image geometry of a plan, following torchvision's arithmetic to the pixel.
#include "engine/plan.h"

#include <cmath>

#include "augment/params.h"

namespace fastload::engine {
namespace {

// torchvision's _compute_resized_output_size.
void resized_size(const Plan& plan, int height, int width, int& new_height, int& new_width) {
  if (plan.resize_short > 0) {
    const bool wide = width > height;
    const int short_side = wide ? height : width;
    const int long_side = wide ? width : height;
    int new_short = plan.resize_short;
    int new_long = static_cast<int>(static_cast<double>(new_short) * long_side / short_side);
    if (plan.max_size > 0 && new_long > plan.max_size) {
      new_short = static_cast<int>(static_cast<double>(plan.max_size) * new_short / new_long);
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
int center_crop_start(int size, int crop) {
  if (crop > size) return -((crop - size) / 2);
  return static_cast<int>(std::rint((size - crop) / 2.0));
}

}  // namespace

SourceRegion plan_region(const Plan& plan, int height, int width, int64_t epoch, int64_t index) {
  SourceRegion region;
  const Box image{0.f, 0.f, static_cast<float>(height), static_cast<float>(width)};
  if (plan.geometry == Geometry::kRandomResizedCrop) {
    SampleRng rng(plan.seed, epoch, index, ParamStream::kCrop);
    const CropBox crop = random_resized_crop_box(height, width, plan.scale_min, plan.scale_max,
                                                 plan.ratio_min, plan.ratio_max, rng);
    region.box = {static_cast<float>(crop.top), static_cast<float>(crop.left),
                  static_cast<float>(crop.height), static_cast<float>(crop.width)};
    region.clamp = region.box;  // torchvision crops first, then resizes the crop
  } else {
    int new_height, new_width;
    resized_size(plan, height, width, new_height, new_width);
    const double sy = static_cast<double>(height) / new_height;
    const double sx = static_cast<double>(width) / new_width;
    const int top = center_crop_start(new_height, plan.out_height);
    const int left = center_crop_start(new_width, plan.out_width);
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
