// A mask's geometry from the view it follows, in integers, and its nearest-neighbour write.
#include "augment/views.h"

#include <algorithm>
#include <cstring>

namespace fastload {

void mask_axes(const Plan& plan, const Region& region, int height, int width, MaskAxis& rows, MaskAxis& cols) {
  rows = MaskAxis{height, plan.out_height, 0, 0, region.flip_v};
  cols = MaskAxis{width, plan.out_width, 0, 0, region.flip};
  if (plan.geometry == Geometry::kRandomResizedCrop) {
    // torchvision crops (integer box), then resizes the crop to the output size.
    rows.in_size = static_cast<int64_t>(region.box.height);
    cols.in_size = static_cast<int64_t>(region.box.width);
    rows.source_offset = static_cast<int64_t>(region.box.top);
    cols.source_offset = static_cast<int64_t>(region.box.left);
  } else if (plan.geometry == Geometry::kRandomCrop) {
    // Pad then crop, no resize: output o reads source box.top + o (integers), padding outside.
    rows.resized = height;
    cols.resized = width;
    rows.offset = static_cast<int64_t>(region.box.top);
    cols.offset = static_cast<int64_t>(region.box.left);
  } else {
    const ResizedLayout layout = resized_layout(plan, height, width);
    rows.resized = layout.height;
    cols.resized = layout.width;
    rows.offset = layout.top;
    cols.offset = layout.left;
  }
}

void mask_axis_table(const MaskAxis& axis, int out_size, MaskSampling sampling, std::vector<int32_t>& table) {
  table.assign(static_cast<size_t>(out_size), -1);
  const bool resizes = axis.resized != axis.in_size;
  // Pillow's NEAREST walk (ImagingScaleAffine): x_0 = step / 2, x_{r+1} = x_r + step in
  // double, source (int)x_r; walked once up to the last resized index the output reads.
  const double step = static_cast<double>(axis.in_size) / static_cast<double>(axis.resized);
  double x = step * 0.5;
  int64_t walked = 0;
  for (int o = 0; o < out_size; ++o) {
    const int64_t r = axis.offset + o;
    if (r < 0 || r >= axis.resized) continue;  // padding
    int64_t source = r;
    if (resizes && sampling == MaskSampling::kTensor) {
      source = tensor_nearest_index(r, axis.in_size, axis.resized);
    } else if (resizes && sampling == MaskSampling::kCv2) {
      source = cv2_nearest_index(r, axis.in_size, axis.resized);
    } else if (resizes) {
      for (; walked < r; ++walked) x += step;  // r only grows with o
      source = std::min<int64_t>(static_cast<int64_t>(x), axis.in_size - 1);
    }
    table[static_cast<size_t>(o)] = static_cast<int32_t>(source + axis.source_offset);
  }
  if (axis.flip) std::reverse(table.begin(), table.end());
}

namespace {

template <typename T>
void write_rows(const uint8_t* source, int64_t source_stride, const std::vector<int32_t>& rows,
                const std::vector<int32_t>& cols, T fill, T* out, int64_t stride_y, int64_t stride_x) {
  for (size_t y = 0; y < rows.size(); ++y) {
    T* row_out = out + static_cast<int64_t>(y) * stride_y;
    if (rows[y] < 0) {
      for (size_t x = 0; x < cols.size(); ++x) row_out[static_cast<int64_t>(x) * stride_x] = fill;
      continue;
    }
    const uint8_t* row = source + rows[y] * source_stride;
    for (size_t x = 0; x < cols.size(); ++x) {
      row_out[static_cast<int64_t>(x) * stride_x] = cols[x] < 0 ? fill : static_cast<T>(row[cols[x]]);
    }
  }
}

}  // namespace

void write_mask(const uint8_t* source, int64_t source_stride, const std::vector<int32_t>& rows,
                const std::vector<int32_t>& cols, int fill, void* out, int out_dtype_bytes, int64_t stride_y,
                int64_t stride_x) {
  if (out_dtype_bytes == 1) {
    write_rows<uint8_t>(source, source_stride, rows, cols, static_cast<uint8_t>(fill), static_cast<uint8_t*>(out),
                        stride_y, stride_x);
  } else {
    write_rows<int64_t>(source, source_stride, rows, cols, fill, static_cast<int64_t*>(out), stride_y, stride_x);
  }
}

}  // namespace fastload
