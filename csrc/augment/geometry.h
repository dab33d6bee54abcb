// One sample's geometry: which part of the image is sampled (the region), and which
// view of the decoded pixels the kernel's taps may read (the sampling view).
//
// Stage: augment, before any pixel is touched. Input: a plan, an image's size (from its
// header, or a decoded image), (epoch, index). Output: a Region in full-resolution
// pixels, then, once the decoder says at which DCT scale and origin it decoded, the
// SamplingView the kernel runs on. Pure functions: no state, no allocation. (region_of
// is declared in plan.h, beside Plan: the CPU kernel includes this header for Box and
// has a resize plan of its own.)
#pragma once

#include <cstdint>
#include <stdexcept>

namespace fastload {

// [top, left, height, width] (floats: DCT-scaled and centre-cropped boxes fall between
// pixels).
struct Box {
  float top, left, height, width;
};

enum class Geometry : int {
  kRandomResizedCrop = 0,  // crop (scale, ratio) then resize to out
  kResizeCenterCrop = 1,   // resize (shorter side or fixed size), then centre crop to out
  kRandomCrop = 2,         // pad (zeros), then crop out at a random place, no resize
};

// The resampling filter of a plan's one resize, with Pillow's semantics (antialiased
// when shrinking): crop_resize_flip_normalize.h has the taps of each.
enum class Interpolation : int {
  kBilinear = 0,  // Pillow BILINEAR: the triangle, support 1
  kBicubic = 1,   // Pillow BICUBIC: Keys' cubic, a = -0.5, support 2, clipped to [0, 255]
  kNearest = 2,   // Pillow NEAREST: the pixel under the centre
};

// Where an image's output comes from, in full-resolution pixels of the source image.
struct Region {
  Box box;    // sampled region, mapped onto the output
  Box clamp;  // taps clamp to this region (the crop for RandomResizedCrop, else the image)
  bool flip = false;    // mirror left-right
  bool flip_v = false;  // mirror top-bottom
};

// The view of the decoded pixels that the kernel reads (top, left, height, width in
// decoded pixels, never empty, inside them) and the region's box relative to it.
struct SamplingView {
  int top, left, height, width;
  Box box;
};

// The plan gives an image no pixels to sample: a resize to 0 rows or columns (e.g.
// Resize(256, max_size=300) of a 3x2000 image), an empty crop (an extreme ratio). The
// engine reports it per sample (the loader's on_error policy applies); pybind11 raises
// it as ValueError.
class GeometryError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// THE clamp-region arithmetic: the region's clamp mapped into decoded pixels, rounded
// outwards, then clamped so that the view is never empty and never starts or ends
// outside the `height` x `width` decoded pixels, whatever the rounding (its taps then
// clamp to what was decoded); and the box mapped likewise, relative to the view.
//
// `scale_y/x` map full-resolution coordinates to decoded ones (1/d at DCT scale 1/d:
// scaled pixel k covers full-resolution pixels [k d, k d + d), the last one partly, so
// the image's ceil(h / d) scaled rows hold [0, h / d) -- not scaled_h / h); decoded pixel
// (0, 0) is at (origin_top, origin_left) of the scaled whole image (a decoded window).
// Throws GeometryError ("fastload.<op>: ...") for a clamp or a mapped box the kernel
// cannot use (not finite, or height or width <= 0).
SamplingView sampling_view(const Region& region, int height, int width, double scale_y, double scale_x,
                           int origin_top, int origin_left, const char* op);

}  // namespace fastload
