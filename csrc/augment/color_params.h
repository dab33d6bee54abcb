// Random parameters of ColorJitter, RandomGrayscale and RandomErasing as a pure function
// of (seed, epoch, sample index), like params.h for crop and flip.
//
// The draws follow torchvision's samplers in distribution, with SampleRng in place of
// torch's global generator:
//   ColorJitter     fn_idx = torch.randperm(4): here a Fisher-Yates shuffle (each of the
//                   24 orders with probability 1/24); then each enabled factor uniform in
//                   [min, max], rounded to float as torch's float32 uniform_ is (hue in
//                   [-h, h] is just its [min, max]). Disabled (None) factors draw nothing.
//                   RandomApply([ColorJitter], p) first draws torch.rand(1) < p: here on
//                   a stream of its own, so the jitter's draws are the same with or
//                   without it.
//   RandomGrayscale torch.rand(1) < p.
//   RandomErasing   torch.rand(1) < p, then get_params: 10 attempts of
//                   area * U(scale) and exp(U(log ratio)), h = round(sqrt(area * ratio)),
//                   w = round(sqrt(area / ratio)) (Python's round: half to even), kept
//                   when h < H and w < W, then top ~ randint(0, H - h + 1), left ~
//                   randint(0, W - w + 1); after 10 misses nothing is erased (torchvision
//                   "erases" with the image itself). value="random": element k of the
//                   [C, h, w] patch is a standard normal from its own counter (Box-Muller
//                   on two 53-bit uniforms), so a kernel can draw any element alone.
#pragma once

#include <cmath>
#include <cstdint>

#include "../host_device.h"
#include "color.h"
#include "params.h"

namespace fastload::augment::color {

// ColorJitter's ranges, per ColorOp; enabled[op] false where torchvision holds None.
// p: the probability that the jitter runs at all (RandomApply around it; 1 without).
struct JitterRanges {
  double min[4];
  double max[4];
  bool enabled[4];
  double p = 1.0;
};

FASTLOAD_HD JitterParams color_jitter_params(const JitterRanges& ranges, SampleRng& rng) {
  JitterParams p;
  for (int k = 0; k < 4; ++k) p.order[k] = k;
  for (int k = 3; k > 0; --k) {
    const int j = static_cast<int>(rng.randint(0, k + 1));
    const int swap = p.order[k];
    p.order[k] = p.order[j];
    p.order[j] = swap;
  }
  for (int op = 0; op < 4; ++op) {
    p.enabled[op] = ranges.enabled[op];
    p.factor[op] = p.enabled[op] ? static_cast<float>(rng.uniform(ranges.min[op], ranges.max[op])) : 0.0f;
  }
  return p;
}

FASTLOAD_HD JitterParams color_jitter_params(const JitterRanges& ranges, int64_t seed, int64_t epoch,
                                             int64_t index) {
  SampleRng rng(seed, epoch, index, ParamStream::kColorJitter);
  JitterParams p = color_jitter_params(ranges, rng);
  if (ranges.p < 1.0) {
    SampleRng apply(seed, epoch, index, ParamStream::kJitterApply);
    if (!(apply.uniform() < ranges.p))
      for (int op = 0; op < 4; ++op) p.enabled[op] = false;
  }
  return p;
}

FASTLOAD_HD bool random_grayscale(double p, int64_t seed, int64_t epoch, int64_t index) {
  SampleRng rng(seed, epoch, index, ParamStream::kGrayscale);
  return rng.uniform() < p;
}

// torchvision.transforms.RandomErasing: its p draw, then get_params. {0, 0, 0, 0} when
// nothing is erased (p missed, or 10 attempts missed).
FASTLOAD_HD EraseBox random_erasing_box(int height, int width, double p, double scale_min, double scale_max,
                                        double ratio_min, double ratio_max, SampleRng& rng) {
  const EraseBox none = {0, 0, 0, 0};
  if (!(rng.uniform() < p)) return none;
  const double area = static_cast<double>(height) * width;
  const double log_ratio_min = log(ratio_min);
  const double log_ratio_max = log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * rng.uniform(scale_min, scale_max);
    const double aspect_ratio = exp(rng.uniform(log_ratio_min, log_ratio_max));
    // Compared as doubles: an extreme ratio gives sides far outside the int range.
    const double h_real = rint(sqrt(erase_area * aspect_ratio));
    const double w_real = rint(sqrt(erase_area / aspect_ratio));
    if (!(h_real < height && w_real < width)) continue;
    const int h = static_cast<int>(h_real), w = static_cast<int>(w_real);
    const int top = static_cast<int>(rng.randint(0, height - h + 1));
    const int left = static_cast<int>(rng.randint(0, width - w + 1));
    return {top, left, h, w};
  }
  return none;
}

FASTLOAD_HD EraseBox random_erasing_box(int height, int width, double p, double scale_min, double scale_max,
                                        double ratio_min, double ratio_max, int64_t seed, int64_t epoch,
                                        int64_t index) {
  SampleRng rng(seed, epoch, index, ParamStream::kErase);
  return random_erasing_box(height, width, p, scale_min, scale_max, ratio_min, ratio_max, rng);
}

// A sample's value stream, keyed once per sample (a kernel hoists it out of its pixel loop).
FASTLOAD_HD SampleRng erase_value_rng(int64_t seed, int64_t epoch, int64_t index) {
  return SampleRng(seed, epoch, index, ParamStream::kEraseValue);
}

// The standard normal of element `element` (erase_element) of a sample's random
// patch: Box-Muller on uniforms 2k+1 and 2k+2 of the sample's value stream.
FASTLOAD_HD float erase_normal(SampleRng rng, int64_t element) {
  rng.counter = 2 * static_cast<uint64_t>(element);
  const double u1 = rng.uniform(), u2 = rng.uniform();
  // 1 - u1 lies in (0, 1]: the log is finite.
  return static_cast<float>(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}

FASTLOAD_HD float erase_normal(int64_t seed, int64_t epoch, int64_t index, int64_t element) {
  return erase_normal(erase_value_rng(seed, epoch, index), element);
}

}  // namespace fastload::augment::color
