// Random augmentation parameters as a pure function of (seed, epoch, sample index).
//
// No pixels here and no state: the same (seed, epoch, index) gives the same crop and
// flip whatever the thread count, the batch it lands in, or a resume mid-epoch. The
// draws follow torchvision's samplers (RandomResizedCrop: 10 attempts, then its
// centre-crop fallback; RandomHorizontalFlip, RandomVerticalFlip: p) with a counter-based generator in
// place of torch's global one.
#pragma once

#include <cmath>
#include <cstdint>

#include "../host_device.h"

namespace fastload {

// Streams keep the draws of different ops independent for one sample.
enum class ParamStream : uint64_t {
  kCrop = 1,
  kFlip = 2,
  kColorJitter = 3,
  kGrayscale = 4,
  kErase = 5,
  kEraseValue = 6,
  kFlipVertical = 7,
  kBlur = 8,
  kJitterApply = 9,
  kBlurApply = 10,
  kAutoAugment = 11,
  kAugMix = 12,
};

FASTLOAD_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Counter-based generator: draw k of (seed, epoch, index, stream).
struct SampleRng {
  uint64_t key;
  uint64_t counter = 0;

  FASTLOAD_HD SampleRng(int64_t seed, int64_t epoch, int64_t index, ParamStream stream)
      : key(splitmix64(splitmix64(splitmix64(static_cast<uint64_t>(seed)) ^
                                  static_cast<uint64_t>(epoch)) ^
                       static_cast<uint64_t>(index)) ^
            static_cast<uint64_t>(stream)) {}

  FASTLOAD_HD uint64_t next_u64() { return splitmix64(key + 0x632BE59BD9B4E019ull * ++counter); }

  // Uniform in [0, 1) with 53 random bits.
  FASTLOAD_HD double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  FASTLOAD_HD double uniform(double low, double high) { return low + (high - low) * uniform(); }

  // Uniform integer in [low, high) (high > low), as torch.randint's bounds.
  FASTLOAD_HD int64_t randint(int64_t low, int64_t high) {
    const uint64_t span = static_cast<uint64_t>(high - low);
    return low + static_cast<int64_t>(next_u64() % span);
  }
};

struct CropBox {
  int top, left, height, width;
};

// torchvision.transforms.RandomResizedCrop.get_params, with SampleRng draws.
FASTLOAD_HD CropBox random_resized_crop_box(int height, int width, double scale_min,
                                            double scale_max, double ratio_min,
                                            double ratio_max, SampleRng& rng) {
  const double area = static_cast<double>(height) * width;
  const double log_ratio_min = log(ratio_min);
  const double log_ratio_max = log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale_min, scale_max);
    const double aspect_ratio = exp(rng.uniform(log_ratio_min, log_ratio_max));
    // Python's round() is round-half-even, as is rint in the default rounding mode.
    // Compared as doubles: an extreme ratio gives sides far outside the int range.
    const double w_real = rint(sqrt(target_area * aspect_ratio));
    const double h_real = rint(sqrt(target_area / aspect_ratio));
    if (0 < w_real && w_real <= width && 0 < h_real && h_real <= height) {
      const int w = static_cast<int>(w_real), h = static_cast<int>(h_real);
      const int top = static_cast<int>(rng.randint(0, height - h + 1));
      const int left = static_cast<int>(rng.randint(0, width - w + 1));
      return {top, left, h, w};
    }
  }
  // Fallback to a central crop, exactly as torchvision.
  const double in_ratio = static_cast<double>(width) / height;
  int w, h;
  // Both fallback sides stay within the image (w / ratio_min < height, h * ratio_max <
  // width), but can round to 0: the caller refuses an empty crop.
  if (in_ratio < ratio_min) {
    w = width;
    h = static_cast<int>(rint(w / ratio_min));
  } else if (in_ratio > ratio_max) {
    h = height;
    w = static_cast<int>(rint(h * ratio_max));
  } else {
    w = width;
    h = height;
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

FASTLOAD_HD bool random_flip(double p, SampleRng& rng) { return rng.uniform() < p; }

}  // namespace fastload
