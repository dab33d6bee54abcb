// Partial decode of a prepared JPEG: only the restart segments covering a window's rows
// (and, with column tiles, its columns) are entropy-decoded. Op fastload::decode_jpeg_rows
// (CPU). See transcode.h.
//
// The segments needed are put into a small JPEG in memory: the file's header (SOF
// height and width patched to the rows and tiles kept, APPn/COM other than JFIF and
// Adobe dropped, DRI unchanged), the segments in scan order with their restart markers
// renumbered from RST0 (libjpeg expects the sequence to start again), and EOI. That is a
// valid JPEG of a rectangle of the image (a horizontal band for whole-row layouts):
// with tiles of k MCUs, a band row of t tiles is t * k MCUs, so a restart every k MCUs
// falls exactly where the kept tiles start. decode_jpeg_window decodes it (columns, DCT
// scale, colour) as for any file.
//
// Why the band's pixels equal the whole image's: a restart resets the DC predictors, so
// a segment's coefficients do not depend on the segments before it; the IDCT works per
// block; only chroma upsampling looks across rows. libjpeg's fancy upsampling of a
// vertically subsampled component (4:2:0, 4:4:0...) reads the chroma row above and
// below, and at the band's edge it replicates the edge row instead. That changes only
// the band's first and last scaled rows, so the band gets one extra MCU row (which
// holds at least one chroma row at every DCT scale) on the side where the window
// includes the first or last scaled row of its MCU row, and those rows are not
// returned. Without vertical subsampling (4:4:4, 4:2:2, 4:1:1, gray, CMYK) rows are
// independent. Columns are the same in the other direction: horizontally subsampled
// chroma (4:2:0, 4:2:2, 4:1:1) is upsampled from the neighbouring chroma column, and at
// the rectangle's left or right edge (not the image's) the edge column is replicated,
// which changes the rectangle's first or last scaled column only. So the rectangle gets
// one extra MCU column, hence a tile, on a side only where the window includes the first
// or last scaled column of its MCU, and the rectangle's edge columns are never returned
// (decode_jpeg_window may return columns beyond the window: they are trimmed).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "check.h"
#include "decode/transcode.h"

namespace fastload {
namespace {

// Segment rows [first, last) (a segment row: restart_rows MCU rows for whole-row
// layouts, one MCU row of tiles_per_row segments for tiles), tiles [t0, t1) of each, as
// a JPEG of its own, into `band`: band_height x band_width pixels.
void build_band(const uint8_t* data, const int64_t* seg, const PreparedLayout& L, int64_t first, int64_t last,
                int64_t t0, int64_t t1, int band_height, int band_width, std::vector<uint8_t>& band) {
  const int64_t tiles = L.tiles_per_row;
  size_t bytes = L.header_end + 2;
  for (int64_t r = first; r < last; ++r) {
    for (int64_t k = r * tiles + t0; k < r * tiles + t1; ++k) bytes += static_cast<size_t>(seg[2 * (k + 1)] - seg[2 * k]);
  }
  band.clear();
  band.reserve(bytes);
  band.push_back(0xFF);
  band.push_back(0xD8);
  // parse_prepared_header has checked the marker structure up to header_end.
  size_t i = 2;
  while (i < L.header_end) {
    const uint8_t marker = data[i + 1];
    const size_t length = (static_cast<size_t>(data[i + 2]) << 8) | data[i + 3];
    const bool app_or_com = (marker >= 0xE0 && marker <= 0xEF) || marker == 0xFE;
    const bool needed_app = (marker == 0xE0 && length >= 7 && std::memcmp(data + i + 4, "JFIF\0", 5) == 0) ||
                            (marker == 0xEE && length >= 7 && std::memcmp(data + i + 4, "Adobe", 5) == 0);
    if (!app_or_com || needed_app) {
      const size_t at = band.size();
      band.insert(band.end(), data + i, data + i + 2 + length);
      if (i == L.sof_offset) {  // frame size: the band's rows and columns
        band[at + 5] = static_cast<uint8_t>(band_height >> 8);
        band[at + 6] = static_cast<uint8_t>(band_height & 0xFF);
        band[at + 7] = static_cast<uint8_t>(band_width >> 8);
        band[at + 8] = static_cast<uint8_t>(band_width & 0xFF);
      }
    }
    i += 2 + length;
  }
  int64_t n = 0;
  const int64_t count = (last - first) * (t1 - t0);
  for (int64_t r = first; r < last; ++r) {
    for (int64_t k = r * tiles + t0; k < r * tiles + t1; ++k, ++n) {
      // Segment k's data and, except after the last one, a restart marker in sequence.
      band.insert(band.end(), data + seg[2 * k], data + seg[2 * (k + 1)] - 2);
      band.push_back(0xFF);
      band.push_back(n + 1 < count ? static_cast<uint8_t>(0xD0 + (n & 7)) : 0xD9);
    }
  }
}

uint32_t be32(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | static_cast<uint32_t>(p[3]);
}
uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

[[noreturn]] void bad_index(const std::string& what) {
  throw DecodeError("expected a well-formed segment index marker (APP15 FLSEG, version " +
                    std::to_string(kSegmentMarkerVersion) + " or 1), got " + what +
                    ". Prepare the dataset again with this fastload (fastload.prepare)");
}

// Version 2's body after the version byte: the layout, then (offset, row, column)
// entries, checked for their own consistency and against the header; `segments` gets
// the (offset, row) index.
void read_index_v2(const uint8_t* data, size_t size, const uint8_t* p, size_t len, std::vector<int64_t>& segments) {
  if (len < 4 || (len - 4) % 8 != 0 || (len - 4) / 8 < 2) {
    bad_index("a version 2 body of " + std::to_string(len) +
              " bytes (4 bytes of layout and at least two 8-byte entries expected)");
  }
  const int interval = be16(p), mcus_per_row = be16(p + 2);
  const size_t rows = (len - 4) / 8;
  segments.resize(2 * rows);
  const uint8_t* e = p + 4;
  for (size_t k = 0; k < rows; ++k, e += 8) {
    segments[2 * k] = be32(e);
    segments[2 * k + 1] = be16(e + 4);
  }
  // The layout must be the file's: the header says how the scan is cut.
  if (segments[0] <= 0 || static_cast<uint64_t>(segments[0]) >= size) {
    bad_index("a first offset of " + std::to_string(segments[0]) + " outside the " + std::to_string(size) +
              "-byte file");
  }
  const PreparedLayout L = parse_prepared_header(data, size, static_cast<size_t>(segments[0]));
  if (interval != L.restart_interval || mcus_per_row != L.mcus_per_row) {
    bad_index("a layout of a restart every " + std::to_string(interval) + " MCUs in rows of " +
              std::to_string(mcus_per_row) + " MCUs for a file whose header says " +
              std::to_string(L.restart_interval) + " and " + std::to_string(L.mcus_per_row));
  }
  e = p + 4;
  for (size_t k = 0; k < rows; ++k, e += 8) {
    const int64_t column = be16(e + 6);
    const int64_t want = k + 1 < rows ? static_cast<int64_t>(k) % L.tiles_per_row : 0;
    if (column != want) {
      bad_index("tile column " + std::to_string(column) + " in entry " + std::to_string(k) + " (" +
                std::to_string(want) + " expected: segments follow the scan order, " +
                std::to_string(L.tiles_per_row) + " per MCU row)");
    }
  }
}

// The MCUs [first, last) of one axis that pixels [begin, end) need, of `count` MCUs of
// `mcu` pixels. Where chroma is upsampled along the axis (the triangle filter spans
// adjacent chroma samples), only the first and the last scaled pixel of an MCU read the
// neighbouring MCU: a window that starts after its MCU's first scaled pixel, or ends
// before its last, needs no context on that side. A scaled pixel covers `scale_denom`
// full-resolution ones.
void mcu_span(int begin, int end, int mcu, int count, bool upsampled, int scale_denom, int& first, int& last) {
  first = begin / mcu;
  last = (end + mcu - 1) / mcu;
  if (!upsampled) return;
  if (begin % mcu < scale_denom) first = std::max(first - 1, 0);
  if (end % mcu == 0 || end % mcu > mcu - scale_denom) last = std::min(last + 1, count);
}

}  // namespace

bool read_embedded_segments(const uint8_t* data, size_t size, std::vector<int64_t>& segments) {
  constexpr size_t kIdBytes = sizeof(kSegmentMarkerId);  // "FLSEG" and its NUL
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) return false;
  size_t i = 2;
  while (i + 4 <= size && data[i] == 0xFF) {
    const uint8_t marker = data[i + 1];
    // Up to the scan: the index is a header marker; past a SOS only entropy data follows.
    if (marker == 0xDA || marker == 0xD9 || marker == 0xD8 || marker == 0xFF || marker == 0x00 ||
        (marker >= 0xD0 && marker <= 0xD7)) {
      return false;
    }
    const size_t length = be16(data + i + 2);
    if (length < 2 || i + 2 + length > size) return false;  // a broken header: the decoder says so
    if (marker == kSegmentMarker && length >= 2 + kIdBytes &&
        std::memcmp(data + i + 4, kSegmentMarkerId, kIdBytes) == 0) {
      const uint8_t* body = data + i + 4 + kIdBytes;
      const size_t body_len = length - 2 - kIdBytes;
      if (body_len < 1) bad_index("an empty one (no version byte)");
      if (body[0] == kSegmentMarkerVersion) {
        read_index_v2(data, size, body + 1, body_len - 1, segments);
        return true;
      }
      if (body[0] != 1) {
        bad_index("version " + std::to_string(body[0]) + " (this fastload reads versions 1 and " +
                  std::to_string(kSegmentMarkerVersion) + ")");
      }
      // Version 1: whole-row layouts, (offset, row) pairs.
      if ((body_len - 1) % 8 != 0 || body_len < 1 + 16) {
        bad_index("version 1 with " + std::to_string(body_len - 1) +
                  " bytes of pairs (at least two 8-byte pairs expected)");
      }
      const size_t rows = (body_len - 1) / 8;
      segments.resize(2 * rows);
      const uint8_t* p = body + 1;
      for (size_t k = 0; k < 2 * rows; ++k, p += 4) segments[k] = be32(p);
      return true;
    }
    i += 2 + length;
  }
  return false;
}

void decode_jpeg_rows(const uint8_t* data, size_t size, const int64_t* seg, int64_t segment_rows, int top, int left,
                      int height, int width, int scale_denom, int channels, int64_t max_pixels, DecodedWindow& out) {
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8) {
    throw std::invalid_argument("expected scale_denom 1, 2, 4 or 8, got " + std::to_string(scale_denom));
  }
  if (channels != 1 && channels != 3) {
    throw std::invalid_argument("expected channels 1 or 3, got " + std::to_string(channels));
  }
  if (size < 4 || !is_jpeg(data, size)) throw DecodeError("expected a JPEG (starting with FF D8 FF)");
  const PreparedLayout L = check_segments(data, size, seg, segment_rows);
  // The limits apply to the image, not to the smaller band libjpeg will see.
  JpegInfo info;
  info.height = L.height;
  info.width = L.width;
  info.components = L.components;
  const std::string limit = jpeg_limit_error(data, size, info, max_pixels);
  if (!limit.empty()) throw DecodeError(limit);

  if (height <= 0) top = 0, height = L.height;
  if (width <= 0) left = 0, width = L.width;
  top = std::max(top, 0);
  left = std::max(left, 0);
  const int bottom = std::min(top + height, L.height);
  if (top >= bottom || left >= L.width) {
    throw std::invalid_argument("expected a window inside the " + std::to_string(L.height) + "x" +
                                std::to_string(L.width) + " image, got [top=" + std::to_string(top) +
                                ", left=" + std::to_string(left) + ", height=" + std::to_string(height) +
                                ", width=" + std::to_string(width) + "]");
  }
  const int right = std::min(left + width, L.width);
  // MCU rows, then MCU columns (for tiles), the window touches, widened for the
  // upsampling context, then whole segments.
  int row0 = 0, row1 = 0;
  mcu_span(top, bottom, L.mcu_height, L.mcu_rows, L.vertical_upsampling, scale_denom, row0, row1);
  const int64_t tiles = L.tiles_per_row;
  int64_t t0 = 0, t1 = tiles;
  if (tiles > 1) {
    int col0 = 0, col1 = 0;
    mcu_span(left, right, L.mcu_width, L.mcus_per_row, L.horizontal_upsampling, scale_denom, col0, col1);
    t0 = col0 / L.restart_interval;
    t1 = (col1 + L.restart_interval - 1) / L.restart_interval;
  }
  const int64_t segment_row_count = tiles > 1 ? L.mcu_rows : segment_rows - 1;
  const int64_t first = row0 / L.restart_rows;
  const int64_t last = std::min<int64_t>((row1 + L.restart_rows - 1) / L.restart_rows, segment_row_count);
  if (first == 0 && last == segment_row_count && t0 == 0 && t1 == tiles) {
    decode_jpeg_window(data, size, top, left, bottom - top, right - left, scale_denom, channels, 0, out);
    return;
  }
  const int y0 = static_cast<int>(first) * L.restart_rows * L.mcu_height;
  const int y1 = std::min(static_cast<int>(last) * L.restart_rows * L.mcu_height, L.height);
  const int tile_width = L.restart_interval * L.mcu_width;  // tiles > 1 only
  const int x0 = tiles > 1 ? static_cast<int>(t0) * tile_width : 0;
  const int x1 = tiles > 1 ? std::min(static_cast<int>(t1) * tile_width, L.width) : L.width;
  std::vector<uint8_t> band;
  build_band(data, seg, L, first, last, t0, t1, y1 - y0, x1 - x0, band);
  decode_jpeg_window(band.data(), band.size(), top - y0, left - x0, bottom - top, right - left, scale_denom, channels,
                     0, out);
  // y0 and x0 are multiples of 8, hence of the scale: band row j is scaled row y0 / d + j.
  const int d = scale_denom;
  out.top += y0 / d;
  out.left += x0 / d;
  out.scaled_height = (L.height + d - 1) / d;
  out.scaled_width = (L.width + d - 1) / d;
  // Columns beyond the window that are the rectangle's edge (not the image's) had their
  // chroma neighbour replicated: not the image's pixels. Drop them.
  const bool h = L.horizontal_upsampling;
  const int keep0 = h && x0 > 0 ? x0 / d + 1 : 0;
  const int keep1 = h && x1 < L.width ? (x1 + d - 1) / d - 1 : out.scaled_width;
  const int from = std::max(out.left, keep0), to = std::min(out.left + out.width, keep1);
  if (from != out.left || to != out.left + out.width) {
    const size_t c = static_cast<size_t>(out.channels);
    const size_t row_in = static_cast<size_t>(out.width) * c, row_out = static_cast<size_t>(to - from) * c;
    const size_t skip = static_cast<size_t>(from - out.left) * c;
    for (int y = 0; y < out.height; ++y) {
      std::memmove(out.pixels.data() + y * row_out, out.pixels.data() + y * row_in + skip, row_out);
    }
    out.pixels.resize(row_out * static_cast<size_t>(out.height));
    out.left = from;
    out.width = to - from;
  }
}

// ---- op ---------------------------------------------------------------------------
namespace {

at::Tensor decode_jpeg_rows_op(const at::Tensor& jpeg, const at::Tensor& segments, c10::IntArrayRef window,
                               int64_t scale_denom, int64_t channels, int64_t max_pixels) {
  constexpr const char* op = "decode_jpeg_rows";
  FASTLOAD_CHECK(jpeg.device().is_cpu() && jpeg.scalar_type() == at::kByte && jpeg.dim() == 1 && jpeg.is_contiguous(),
                 op, "expected the prepared JPEG's bytes as a contiguous 1-D uint8 CPU tensor, got ",
                 jpeg.scalar_type(), " of shape ", jpeg.sizes(), " on ", jpeg.device(), ".");
  FASTLOAD_CHECK(jpeg.numel() > 0, op, "expected a prepared JPEG, got 0 bytes. Re-create it with transcode_jpeg.");
  FASTLOAD_CHECK(is_jpeg(jpeg.data_ptr<uint8_t>(), static_cast<size_t>(jpeg.numel())), op,
                 "expected a JPEG (starting with FF D8 FF), got ", jpeg.numel(),
                 " bytes that are not one. Pass transcode_jpeg's first result.");
  FASTLOAD_CHECK(segments.device().is_cpu() && segments.scalar_type() == at::kLong && segments.dim() == 2 &&
                     segments.size(1) == 2,
                 op, "expected segments as an int64 [K + 1, 2] CPU tensor (transcode_jpeg's second result), got ",
                 segments.scalar_type(), " of shape ", segments.sizes(), " on ", segments.device(), ".");
  FASTLOAD_CHECK_VALUE(scale_denom == 1 || scale_denom == 2 || scale_denom == 4 || scale_denom == 8, op,
                       "expected scale_denom 1, 2, 4 or 8, got ", scale_denom,
                       ". libjpeg-turbo's other scales take slow paths; resize afterwards instead.");
  FASTLOAD_CHECK_VALUE(channels == 1 || channels == 3, op, "expected channels 1 (luma) or 3 (RGB), got ", channels,
                       ".");
  FASTLOAD_CHECK_VALUE(window.empty() || window.size() == 4, op,
                       "expected window [] or [top, left, height, width], got ", window.size(), " values.");
  const at::Tensor seg = segments.contiguous();
  const auto* bytes = jpeg.data_ptr<uint8_t>();
  const auto size = static_cast<size_t>(jpeg.numel());
  int top = 0, left = 0, height = 0, width = 0;
  auto out = std::make_unique<DecodedWindow>();
  try {
    const PreparedLayout L = check_segments(bytes, size, seg.data_ptr<int64_t>(), seg.size(0));
    if (!window.empty()) {
      FASTLOAD_CHECK_VALUE(window[0] >= 0 && window[1] >= 0 && window[2] > 0 && window[3] > 0 &&
                               window[0] + window[2] <= L.height && window[1] + window[3] <= L.width,
                           op, "expected a window [top, left, height, width] inside the ", L.height, "x", L.width,
                           " image with height, width > 0, got ", window,
                           ". Clamp the crop to the image size (see jpeg_header).");
      top = static_cast<int>(window[0]);
      left = static_cast<int>(window[1]);
      height = static_cast<int>(window[2]);
      width = static_cast<int>(window[3]);
    }
    decode_jpeg_rows(bytes, size, seg.data_ptr<int64_t>(), seg.size(0), top, left, height, width,
                     static_cast<int>(scale_denom), static_cast<int>(channels), max_pixels, *out);
  } catch (const DecodeError& e) {
    FASTLOAD_CHECK(false, op, e.what(), ".");
  } catch (const std::invalid_argument& e) {
    FASTLOAD_CHECK_VALUE(false, op, e.what(), ".");
  }
  return scaled_window_tensor(std::move(out), window.empty(), left, width, static_cast<int>(scale_denom));
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) { m.impl("decode_jpeg_rows", &decode_jpeg_rows_op); }

}  // namespace fastload
