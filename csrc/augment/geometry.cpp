// Per-image geometry of a plan, following torchvision's arithmetic to the pixel, and the
// clamp-region arithmetic that maps it onto decoded pixels.
#include "augment/geometry.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "augment/crop_resize_flip_normalize_checks.h"
#include "augment/params.h"
#include "augment/plan.h"

namespace fastload {
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

ResizedLayout resized_layout(const Plan& plan, int height, int width) {
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
  return {new_height, new_width, center_crop_start(new_height, plan.out_height),
          center_crop_start(new_width, plan.out_width)};
}

Region region_of(const Plan& plan, int height, int width, int64_t epoch, int64_t index) {
  Region region;
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
  } else if (plan.geometry == Geometry::kRandomCrop) {
    // torchvision.transforms.RandomCrop.forward: pad, pad_if_needed (both sides by the
    // missing amount), then get_params on the padded size. Padding reads 0 (the kernel's
    // rule for centres outside the image), torchvision's fill=0; another fill or mode is
    // written over it by the uint8 stage (color_pass_of's PadRecord, blur_cpu.h).
    int64_t top_pad = plan.pad_top, left_pad = plan.pad_left;
    int64_t padded_h = height + top_pad + plan.pad_bottom, padded_w = width + left_pad + plan.pad_right;
    const int64_t th = plan.out_height, tw = plan.out_width;
    if (plan.pad_if_needed && padded_w < tw) {
      left_pad += tw - padded_w;
      padded_w += 2 * (tw - padded_w);
    }
    if (plan.pad_if_needed && padded_h < th) {
      top_pad += th - padded_h;
      padded_h += 2 * (th - padded_h);
    }
    if (padded_h < th || padded_w < tw) {
      throw GeometryError("fastload.RandomCrop: Required crop size (" + std::to_string(th) + ", " + std::to_string(tw) +
                          ") is larger than input image size (" + std::to_string(padded_h) + ", " +
                          std::to_string(padded_w) + "). Pass pad_if_needed=True, or padding");
    }
    int64_t i = 0, j = 0;
    if (padded_h != th || padded_w != tw) {
      SampleRng rng(plan.seed, epoch, index, ParamStream::kCrop);
      i = rng.randint(0, padded_h - th + 1);
      j = rng.randint(0, padded_w - tw + 1);
    }
    region.box = {static_cast<float>(i - top_pad), static_cast<float>(j - left_pad), static_cast<float>(th),
                  static_cast<float>(tw)};
    region.clamp = image;
  } else {
    const ResizedLayout layout = resized_layout(plan, height, width);
    const double sy = static_cast<double>(height) / layout.height;
    const double sx = static_cast<double>(width) / layout.width;
    const int64_t top = layout.top, left = layout.left;
    region.box = {static_cast<float>(top * sy), static_cast<float>(left * sx),
                  static_cast<float>(plan.out_height * sy), static_cast<float>(plan.out_width * sx)};
    region.clamp = image;  // the whole image was resized, then cropped
  }
  if (plan.flip_p > 0.0) {
    SampleRng rng(plan.seed, epoch, index, ParamStream::kFlip);
    region.flip = random_flip(plan.flip_p, rng);
  }
  if (plan.flip_v_p > 0.0) {
    SampleRng rng(plan.seed, epoch, index, ParamStream::kFlipVertical);
    region.flip_v = random_flip(plan.flip_v_p, rng);
  }
  return region;
}

SamplingView sampling_view(const Region& region, int height, int width, double scale_y, double scale_x,
                           int origin_top, int origin_left, const char* op) {
  const Box& clamp = region.clamp;
  if (!box_valid(clamp.top, clamp.left, clamp.height, clamp.width)) {
    throw GeometryError(std::string("fastload.") + op + ": expected a finite clamp region with height, width > 0, got [" +
                        std::to_string(clamp.top) + ", " + std::to_string(clamp.left) + ", " +
                        std::to_string(clamp.height) + ", " + std::to_string(clamp.width) + "]");
  }
  // The 1e-6 absorbs the float rounding of a clamp edge that lies on a pixel boundary.
  const auto first_index = [](double v, int size) {
    return static_cast<int>(std::clamp(std::floor(v + 1e-6), 0.0, static_cast<double>(size - 1)));
  };
  const auto end_index = [](double v, int begin, int size) {
    return static_cast<int>(std::clamp(std::ceil(v - 1e-6), static_cast<double>(begin + 1), static_cast<double>(size)));
  };
  const double clamp_top = static_cast<double>(clamp.top) * scale_y - origin_top;
  const double clamp_left = static_cast<double>(clamp.left) * scale_x - origin_left;
  const double clamp_bottom = (static_cast<double>(clamp.top) + clamp.height) * scale_y - origin_top;
  const double clamp_right = (static_cast<double>(clamp.left) + clamp.width) * scale_x - origin_left;
  const int row0 = first_index(clamp_top, height), col0 = first_index(clamp_left, width);
  const int row1 = end_index(clamp_bottom, row0, height), col1 = end_index(clamp_right, col0, width);
  const Box box{static_cast<float>(region.box.top * scale_y - origin_top - row0),
                static_cast<float>(region.box.left * scale_x - origin_left - col0),
                static_cast<float>(region.box.height * scale_y), static_cast<float>(region.box.width * scale_x)};
  if (!box_valid(box.top, box.left, box.height, box.width)) {
    throw GeometryError(std::string("fastload.") + op +
                        ": expected a finite crop box with height, width > 0 in the decoded image, got [" +
                        std::to_string(box.top) + ", " + std::to_string(box.left) + ", " +
                        std::to_string(box.height) + ", " + std::to_string(box.width) +
                        "]. The plan's crop is too small for this image");
  }
  return SamplingView{row0, col0, row1 - row0, col1 - col0, box};
}

}  // namespace fastload
