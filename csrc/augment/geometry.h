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

#include "../host_device.h"

namespace fastload {

// [top, left, height, width] (floats: DCT-scaled and centre-cropped boxes fall between
// pixels).
struct Box {
  float top, left, height, width;
};

enum class Geometry : int {
  kRandomResizedCrop = 0,  // crop (scale, ratio) then resize to out
  kResizeCenterCrop = 1,   // resize (shorter side or fixed size), then centre crop to out
  kRandomCrop = 2,         // pad (Plan::padding_mode, pad_fill), then crop out at a random place, no resize
};

// RandomCrop's padding_mode (torchvision's F.pad on a PIL image, i.e. numpy.pad's modes).
// Plain ints in the plan (Plan::padding_mode), so that Python sets them without a binding.
enum PaddingMode : int {
  kPadConstant = 0,   // pad_fill (0 without one)
  kPadEdge = 1,       // the nearest edge pixel
  kPadReflect = 2,    // mirrored about the edge pixel: ... 2 1 | 0 1 2 ...
  kPadSymmetric = 3,  // mirrored about the edge: ... 1 0 | 0 1 ...
};

// The pixel that padded index j (-inf < j < inf) of an axis of `size` (> 0) pixels reads
// in padding_mode `mode` (edge, reflect or symmetric), as numpy.pad, which repeats the
// reflection where the padding is wider than the image (a periodic extension); a 1-pixel
// axis reflects onto itself. Indices inside [0, size) map onto themselves. kPadConstant
// has no source pixel: the caller fills; here it clamps like edge.
FASTLOAD_HD int64_t padded_source_index(int64_t j, int64_t size, int mode) {
  if (j >= 0 && j < size) return j;
  if (mode == kPadReflect || mode == kPadSymmetric) {
    const int64_t period = mode == kPadReflect ? 2 * (size - 1) : 2 * size;
    if (period <= 0) return 0;  // reflect of one pixel
    int64_t m = j % period;
    if (m < 0) m += period;
    if (m >= size) m = (mode == kPadReflect ? period : period - 1) - m;
    return m;
  }
  return j < 0 ? 0 : size - 1;
}

// The resampling filter of a plan's one resize: crop_resize_flip_normalize.h has the
// taps of each. Pillow's filters antialias (widen with the scale when shrinking);
// kBilinearNoAntialias is the plain bilinear interpolation of OpenCV's INTER_LINEAR and
// torch's interpolate(mode="bilinear", antialias=False), which albumentations resizes with.
enum class Interpolation : int {
  kBilinear = 0,  // Pillow BILINEAR: the triangle, support 1 (x the scale when shrinking)
  kBicubic = 1,   // Pillow BICUBIC: Keys' cubic, a = -0.5, support 2, clipped to [0, 255]
  kNearest = 2,   // Pillow NEAREST: the pixel under the centre
  kBilinearNoAntialias = 3,  // the triangle, support 1 at every scale: aliases when shrinking
};
constexpr int kInterpolationCount = 4;

// RandomCrop's padding as the fused pass's uint8 stage applies it (plan.h's padding_mode
// and pad_fill): output pixels whose source lies outside the image read `fill` (constant)
// or the pixel padded_source_index maps them onto. Off: the kernel's zero padding.
struct PadRecord {
  bool on = false;
  int mode = kPadConstant;
  uint8_t fill[3] = {0, 0, 0};
  // Where the view the kernel reads starts in the image, and the image's size (0: the view
  // is the whole image). Positions are mapped about the image's edges, not the view's, so
  // the engine decodes only the pixels the crop and its padding read.
  int32_t view_top = 0, view_left = 0, image_height = 0, image_width = 0;
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
