// The float resample's per-sample set-up (resample_float_cpu.h): the tap tables of both
// axes (the flips folded in) and the buffers, in the caller's ResizeScratch; and the
// baseline build of its row loops (resample_float_cpu_impl.h; the AVX2 build:
// resample_float_cpu_avx2.cpp).
#include "augment/resample_float_cpu.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "augment/crop_resize_flip_normalize.h"

namespace fastload::augment {

namespace {

// The taps of every output index of an axis, in order. NEAREST walks Pillow's
// accumulated coordinate once (compute_taps would add up to i for each i).
void axis_taps(const Axis& axis, int n, std::vector<Taps>& taps) {
  taps.resize(static_cast<size_t>(n));
  if (axis.mode == Interpolation::kNearest) {
    double x = nearest_origin(axis);
    for (int i = 0; i < n; ++i, x += axis.step) taps[i] = nearest_taps(axis, x);
    return;
  }
  for (int i = 0; i < n; ++i) taps[i] = compute_taps(axis, i);
}

}  // namespace

void build_row_plan(const ImageView& in, const Box& box, const Resample& resample, float scale, const float* mean,
                    const float* std, const OutputView& out, ResizeScratch& scratch, RowPlan& plan, bool pil_order) {
  const int C = in.channels, OH = out.height, OW = out.width;
  const bool flip = resample.flip;
  // Pillow's order (horizontal pass first, its uint8 intermediate) where a uint8 image
  // is the result (the colour ops' PIL stage), or where the filter must clip (bicubic).
  plan.clipped = clips(resample.interpolation) || pil_order;
  plan.round_intermediate = pil_order;
  plan.channels = C;
  plan.out_h = OH;
  plan.out_w = OW;
  plan.uint8_bounded = true;
  for (int c = 0; c < C; ++c) {
    plan.alpha[c] = scale / std[c];
    plan.beta[c] = -mean[c] / std[c];
    // The resampled v lies in [0, 255], so |v * alpha + beta| <= 255 |alpha| + |beta|.
    plan.uint8_bounded &= 255.0f * std::fabs(plan.alpha[c]) + std::fabs(plan.beta[c]) < 1e9f;
  }

  // Columns. Flip mirrors the output, so output x takes the taps of column OW-1-x.
  const Axis ax = make_axis(box.left, box.width, in.width, OW, resample.interpolation);
  auto& column_taps = scratch.column_taps;
  axis_taps(ax, OW, column_taps);
  int col0 = INT_MAX, col1 = 0, taps_x = 0;
  for (int x = 0; x < OW; ++x) {
    const Taps& t = column_taps[x];
    if (t.count > 0) {
      col0 = std::min(col0, t.first);
      col1 = std::max(col1, t.first + t.count);
      taps_x = std::max(taps_x, t.count);
    }
  }
  if (taps_x == 0) col0 = col1 = 0;  // every column is padding
  plan.taps_x = taps_x;
  plan.col0 = col0;
  plan.span = col1 - col0;
  auto& first_x = scratch.horizontal_first;
  first_x.resize(static_cast<size_t>(OW));
  auto& wx = scratch.horizontal_weights;
  const size_t pairs = (static_cast<size_t>(OW) + 1) / 2;
  wx.assign(C == 3 ? pairs * taps_x * 8 : static_cast<size_t>(OW) * taps_x, 0.0f);
  for (int x = 0; x < OW; ++x) {
    const Taps& t = column_taps[flip ? OW - 1 - x : x];
    for (int k = 0; k < t.count; ++k) {
      const float w = tap_weight(ax, t.centre, t.first + k) * t.norm;
      if (C == 3) {
        float* lanes = &wx[(static_cast<size_t>(x / 2) * taps_x + k) * 8 + (x % 2) * 4];
        lanes[0] = lanes[1] = lanes[2] = lanes[3] = w;
      } else {
        wx[static_cast<size_t>(x) * taps_x + k] = w;
      }
    }
    // Padding columns keep all-zero weights and read from col0: their value is 0.
    first_x[x] = t.count > 0 ? t.first - col0 : 0;
  }
  plan.first_x = first_x.data();
  plan.wx = wx.data();

  // Rows. The vertical flip mirrors them as the horizontal one mirrors the columns.
  const Axis ay = make_axis(box.top, box.height, in.height, OH, resample.interpolation);
  auto& row_taps = scratch.row_taps;
  axis_taps(ay, OH, row_taps);
  auto& rows_y = scratch.vertical_first;
  rows_y.resize(2 * static_cast<size_t>(OH));  // + the ring's tags, below
  int taps_y = 0;
  for (int y = 0; y < OH; ++y) taps_y = std::max(taps_y, row_taps[y].count);
  auto& wy = scratch.vertical_weights;
  wy.assign(static_cast<size_t>(OH) * std::max(taps_y, 1), 0.0f);
  for (int y = 0; y < OH; ++y) {
    const Taps& t = row_taps[resample.flip_v ? OH - 1 - y : y];
    rows_y[2 * y] = t.first;
    rows_y[2 * y + 1] = plan.span > 0 ? t.count : 0;
    for (int k = 0; k < t.count; ++k)
      wy[static_cast<size_t>(y) * taps_y + k] = tap_weight(ay, t.centre, t.first + k) * t.norm;
  }
  // The ring holds converted source rows, or (clipped) horizontally resampled ones.
  const int64_t ring_floats = plan.clipped ? (C == 3 ? 4 * static_cast<int64_t>(OW) : OW)
                                           : static_cast<int64_t>(plan.span) * C;
  const int64_t ring_stride = (ring_floats + 15) / 16 * 16;  // 64-byte steps
  plan.ring_stride = ring_stride;
  plan.ring_rows = static_cast<int>(std::min<int64_t>(
      taps_y, std::max<int64_t>(kTapChunk, kRingFloats / std::max<int64_t>(ring_stride, 1))));
  rows_y.resize(2 * static_cast<size_t>(OH) + plan.ring_rows);
  std::fill(rows_y.begin() + 2 * static_cast<size_t>(OH), rows_y.end(), -1);
  plan.rows_y = rows_y.data();
  plan.ring_row = rows_y.data() + 2 * static_cast<size_t>(OH);
  plan.wy = wy.data();
  plan.taps_y = taps_y;

  // Buffers. The tail of `row` beyond span * C stays zero: zero-weight taps of the last
  // columns and the spare fourth lane read it, and 0 * garbage could be NaN.
  const size_t row_size = static_cast<size_t>(plan.span + taps_x) * C + 8;
  auto& buffer = scratch.intermediate;
  const size_t hrow_size = (static_cast<size_t>(OW) + 1) * 4;
  const size_t hscratch_size = plan.clipped ? hrow_size : 0;
  buffer.assign(row_size + hrow_size + hscratch_size, 0.0f);
  buffer.resize(row_size + hrow_size + hscratch_size + static_cast<size_t>(plan.ring_stride) * plan.ring_rows);
  plan.row = buffer.data();
  plan.hrow = buffer.data() + row_size;
  plan.hscratch = plan.clipped ? buffer.data() + row_size + hrow_size : nullptr;
  plan.ring = buffer.data() + row_size + hrow_size + hscratch_size;
}

}  // namespace fastload::augment

#define FASTLOAD_ISA_AVX2 0
#include "augment/resample_float_cpu_impl.h"
