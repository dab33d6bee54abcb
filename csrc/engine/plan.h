// A pipeline plan: the fused decode + augment of one loader, fixed for its lifetime.
//
// Python (fastload/augment/plan.py) reduces a list of ops (RandomResizedCrop, Resize,
// CenterCrop, RandomHorizontalFlip, Normalize, ToDtype) to this canonical form; the
// engine applies it to every sample. Geometry is resolved per image, once its header
// says how large it is.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "augment/crop_resize_flip_normalize_cpu.h"

namespace fastload::engine {

enum class Geometry : int {
  kRandomResizedCrop = 0,  // crop (scale, ratio) then resize to out
  kResizeCenterCrop = 1,   // resize (shorter side or fixed size), then centre crop to out
};

struct Plan {
  Geometry geometry = Geometry::kRandomResizedCrop;
  int out_height = 224, out_width = 224;
  // RandomResizedCrop
  double scale_min = 0.08, scale_max = 1.0, ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  // Resize: resize_short > 0 resizes the shorter side to it (max_size caps the longer
  // side, <= 0: none); else to resize_height x resize_width; both <= 0: no resize.
  int resize_short = -1, resize_height = -1, resize_width = -1, max_size = -1;
  double flip_p = 0.0;
  float value_scale = 1.0f / 255.0f;  // value = (v * value_scale - mean) / std
  std::vector<float> mean{0.f, 0.f, 0.f}, std{1.f, 1.f, 1.f};
  int channels = 3;
  bool exact = false;  // true: never DCT-scale (bit-faithful to a full decode)
  int64_t max_pixels = 0;
  int64_t seed = 0;
};

// Where an image's output comes from, in full-resolution pixels of the source image.
struct SourceRegion {
  Box box;        // sampled region, mapped onto the output
  Box clamp;      // taps clamp to this region (the crop for RandomResizedCrop, else the image)
  bool flip = false;
};

// The plan gives an image no pixels to sample: a resize to 0 rows or columns (e.g.
// Resize(256, max_size=300) of a 3x2000 image), an empty crop (an extreme ratio). The
// engine reports it per sample (the loader's on_error policy applies); pybind11 raises
// it as ValueError.
class GeometryError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Geometry of one sample: a pure function of (plan, image size, epoch, index). Throws
// GeometryError where torchvision would fail on that image.
SourceRegion plan_region(const Plan& plan, int height, int width, int64_t epoch, int64_t index);

}  // namespace fastload::engine
