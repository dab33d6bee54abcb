// The float resample of the fused CPU pass: one sample's tap tables (RowPlan,
// build_row_plan, baseline ISA), and the row loops that resample, map and store it
// (resample_float_cpu_impl.h, one build per instruction set: baseline::, avx2::).
//
// Separable, streamed one output row at a time, so the working set stays in L1:
//   1. tap tables for both axes, once per sample (crop_resize_flip_normalize.h);
//   2. per output row: vertical pass over the uint8 rows its taps need, only over the
//      columns the horizontal taps need, into a float row (interleaved channels);
//   3. horizontal pass from that row, flip already in the table. For RGB each output
//      pixel reads its taps as 4-float vectors (RGB + one spare lane) and two output
//      pixels share one 8-float multiply-add, so one instruction serves 2 x 3 channels;
//      the result is one RGBx row;
//   4. normalise + cast + store through the output strides (NCHW and channels_last
//      have their own loops, which g++ vectorises from the RGBx row).
// Vertical first puts the gather-like pass (3) on out_h rows instead of the crop's rows
// and lets padding rows skip all reads. Bicubic clips each pass to [0, 255] as Pillow
// does, after its horizontal pass, so it runs the passes the other way round
// (run_rows_clipped): each source row is resampled horizontally once, into a ring.
#pragma once

#include <cstdint>

#include "augment/color_pass.h"
#include "augment/color_stage_cpu.h"  // ColorRows
#include "augment/crop_resize_flip_normalize_cpu.h"  // ImageView, OutputView, ResizeScratch, Resample

namespace fastload::augment {

// The vertical pass sums at most this many rows per sweep (one sweep but for strong
// downscaling); the ring of converted rows has at least this many slots.
constexpr int kTapChunk = 16;
// The ring's size cap, in floats (4 MB): reached only by strong downscaling of big images.
constexpr int64_t kRingFloats = int64_t{1} << 20;

// One sample's resample: tap tables and buffers, all inside the caller's ResizeScratch.
struct RowPlan {
  int channels, out_h, out_w;
  int taps_x;  // taps per output column, padded with zero weights to the maximum
  int span;    // source columns the horizontal taps touch: [col0, col0 + span)
  int col0;
  const int* first_x;  // [out_w], relative to col0
  // RGB: [ceil(out_w / 2)][taps_x][8], the weight of column 2p in lanes 0-3 and of
  // column 2p+1 in lanes 4-7 (one 8-float load per tap). Gray: [out_w][taps_x].
  const float* wx;
  const int* rows_y;  // [out_h * 2]: first source row, tap count (0 = padding row)
  const float* wy;    // [out_h * taps_y]
  int taps_y;
  // Vertical result (clipped: the converted source row), interleaved:
  // [(span + taps_x) * C + 8], zero tail.
  float* row;
  // Source rows converted to float once each (clipped: resampled horizontally and
  // clipped, RGBx [out_w][4] or gray [out_w]): a ring of ring_rows rows of ring_stride
  // floats, ring_row[slot] = the source row held (-1: none). The rows an output row needs
  // are consecutive and move one way (backwards when flipped vertically), so taps_y slots
  // hold them all; strong downscaling caps the ring (rows then may be converted twice).
  float* ring;
  int* ring_row;
  int ring_rows;
  int64_t ring_stride;
  float* hrow;      // horizontal result (clipped: vertical result): RGBx [out_w + 1][4], or gray [out_w]
  float* hscratch;  // clipped only: one source row's horizontal result, as hrow
  bool clipped;     // bicubic: horizontal pass first, each pass clipped to [0, 255]
  bool round_intermediate;  // and the horizontal result rounded to uint8, as Pillow's (colour ops)
  float alpha[3], beta[3];
  bool uint8_bounded;  // every output value is below 2^31 in magnitude
  // Colour ops (color_pass.h), or null: the resampled rows are rounded into `pixels`
  // (uint8 HWC, out_h x out_w), with the first colour steps done and their luma summed.
  const color::ColorPass* color;
  uint8_t* pixels;
  uint64_t luma_sum;
  bool pixels_ready;  // pixels already hold Pillow's resampled sample (the first colour steps still to run)
  ColorRows color_rows;
};

// Fills `plan` for one sample (baseline ISA: the tap weights are the same floats on every
// CPU). pil_order: Pillow's order and uint8 intermediate (the colour ops' PIL stage).
void build_row_plan(const ImageView& in, const Box& box, const Resample& resample, float scale, const float* mean,
                    const float* std, const OutputView& out, ResizeScratch& scratch, RowPlan& plan, bool pil_order);

// The sample resampled, through the colour steps of plan.color if any, value-mapped,
// cast to out.dtype (Byte, Float, Half, BFloat16; others: nothing written) and stored.
namespace baseline {
void resample_float(RowPlan& plan, const ImageView& in, const OutputView& out);
}
namespace avx2 {
void resample_float(RowPlan& plan, const ImageView& in, const OutputView& out);
}

}  // namespace fastload::augment
