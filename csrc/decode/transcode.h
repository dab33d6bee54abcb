// Prepared JPEGs: a lossless DCT-domain transcode that makes a JPEG partially decodable,
// and the partial decode of the rows a crop window needs.
//
// Stage: decode (and the one-time preparation of a dataset). Input: the bytes of one
// JPEG. Output: the prepared file and its segment index; later, uint8 HWC pixels of a
// window of it, bit-identical to decoding the original file and cropping.
//
// The prepared file is a baseline (sequential, Huffman, one interleaved scan) JPEG
// with the original's DCT coefficients, optimised Huffman tables, and restart markers
// in one of two layouts:
//   whole rows: a restart every `restart_rows` MCU rows (DRI = restart_rows * MCUs per row);
//   column tiles: a restart every k MCUs, k a divisor of the MCUs per row (DRI = k), so
//     each MCU row is split into tiles_per_row = mcus_per_row / k tiles of k MCUs.
// A restart resets the DC predictors, so each restart segment decodes on its own: a
// window needs only the segments covering its rows (and, with tiles, its columns).
//
// The segment index (int64 [K + 1, 2], K = number of restart segments):
//   row k < K: (byte offset in the file where segment k's entropy-coded data begins,
//               MCU row of the scan where segment k starts) -- k * restart_rows for
//               whole rows, k / tiles_per_row for tiles (segment k is then tile column
//               k % tiles_per_row of that row: segments follow the scan order);
//   row K:     (file offset just past the scan's terminating EOI marker, MCU rows of the scan).
// Segment k's entropy-coded bytes are file[seg[k][0] : seg[k+1][0] - 2]; the two bytes
// after them are its terminating marker (RST((k) mod 8) for k < K-1, EOI for the last).
// file[0 : seg[0][0]] is the header, up to and including the SOS segment; its DRI says
// which layout the file has.
// An MCU row is mcu_height pixel rows: 8 * max_v_samp_factor for a multi-component
// (interleaved) scan, 8 for a one-component file (its MCU is one 8x8 block); an MCU
// column is mcu_width pixels (8 * max_h_samp_factor, or 8).
//
// Thread-safe: every call owns its libjpeg state. Errors throw fastload::DecodeError
// (bad data: corrupt or truncated, not a prepared file, an index that does not match
// the file) or std::invalid_argument (bad arguments); both name what was wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "decode/decode_jpeg.h"

namespace fastload {

// A restart marker every 1..kMaxRestartRows MCU rows (libjpeg's DRI holds at most
// 65535 MCUs: 8 rows of a 65535-pixel-wide gray image).
constexpr int kMaxRestartRows = 8;

// restart_rows for transcode_jpeg: column tiles of a width the transcoder chooses
// (choose_tile_mcus), whole MCU rows where it finds none. A negative
// restart_rows -k (k >= 2) asks for tiles of exactly k MCUs (k must divide the MCUs per
// row): for measuring the choice.
constexpr int kRestartTiles = -1;

// Tile widths the transcoder chooses from, in pixels: the divisor k of the MCUs per row
// whose k * mcu_width is nearest kTileWidth within [kMinTileWidth, kMaxTileWidth]
// (benchmarks/restart_interval.py measured the choice; see benchmarks/RESULTS.md).
constexpr int kTileWidth = 64;
constexpr int kMinTileWidth = 32;
constexpr int kMaxTileWidth = 128;

// The tile interval (MCUs) for a scan of mcus_per_row MCUs of mcu_width pixels: a
// divisor of at least 2 in range; else 1 (one-MCU tiles) where an MCU is at least 16
// pixels wide; else 0: whole rows (also for a one-MCU-wide image).
int choose_tile_mcus(int mcus_per_row, int mcu_width);

struct TranscodedJpeg {
  std::vector<uint8_t> data;
  std::vector<int64_t> segments;  // (K + 1) * 2 values, row-major, as described above
};

// Transcodes `data` losslessly (coefficients copied, progressive and arithmetic-coded
// input becomes baseline Huffman). Keeps every APPn and COM marker of the input except
// JFIF APP0 and Adobe APP14, which libjpeg writes anew for the colour space (Adobe for
// RGB, CMYK and YCCK, JFIF with the input's density for YCbCr and gray). Refuses files
// over jpeg_limit_error's limits, any libjpeg warning (corrupt data), and progressive
// files whose scans leave coefficient bits unsent (libjpeg smooths those when decoding,
// which a baseline copy cannot reproduce). restart_rows: 1..kMaxRestartRows (whole
// rows), kRestartTiles (tiles chosen here), or -k (tiles of k MCUs).
TranscodedJpeg transcode_jpeg(const uint8_t* data, size_t size, int restart_rows, int64_t max_pixels);

// The geometry of a prepared file, read from its header (no libjpeg involved).
struct PreparedLayout {
  int height = 0, width = 0;
  int components = 0;
  int max_h = 1, max_v = 1;        // sampling factors
  bool vertical_upsampling = false;  // some component has v < max_v: fancy upsampling reads the rows around
  bool horizontal_upsampling = false;  // some component has h < max_h: fancy upsampling reads the columns around
  int mcu_height = 8;              // pixel rows per MCU row
  int mcu_width = 8;               // pixel columns per MCU
  int mcus_per_row = 0;
  int mcu_rows = 0;                // MCU rows in the scan
  int restart_interval = 0;        // DRI, in MCUs
  int restart_rows = 0;            // MCU rows per segment: restart_interval / mcus_per_row, 1 for tiles
  int tiles_per_row = 1;           // segments per MCU row: mcus_per_row / restart_interval for tiles, else 1
  size_t sof_offset = 0;           // position of the SOF marker (FF C0 / FF C1)
  size_t header_end = 0;           // just past the SOS segment
};

// Parses the header of a prepared file up to its SOS, which must end at header_end.
// Throws DecodeError naming what is not as transcode_jpeg writes it.
PreparedLayout parse_prepared_header(const uint8_t* data, size_t size, size_t header_end);

// Checks `segments` (K + 1 rows of 2, row-major) against the file: count, monotonic
// offsets inside the file, each segment's terminating marker, MCU rows. Throws
// DecodeError naming the first row that is wrong.
PreparedLayout check_segments(const uint8_t* data, size_t size, const int64_t* segments, int64_t rows);

// The segment index embedded in a prepared file (written by fastload.prepare), so that a
// file carries its own index through any copy, tar or WebDataset pipeline: an APP15
// marker segment among the header's markers, version 2:
//   FF EF <length u16> "FLSEG" 00 <version u8 = 2> <restart interval u16, MCUs>
//   <MCUs per row u16> then K + 1 entries (u32 BE offset, u16 BE MCU row, u16 BE tile column),
// the rows of the int64 [K + 1, 2] index above with each segment's tile column (0 for
// whole rows; the end entry: the end offset, the MCU rows, 0), offsets counted in the
// file as stored (marker included). The interval and the MCUs per row must be the
// header's (DRI, SOF), the tile columns those of the scan order. Version 1 (files
// prepared before column tiles: whole rows only) is
//   ... <version u8 = 1> then K + 1 pairs (u32 BE offset, u32 BE MCU row)
// and is still read. Other decoders skip APPn segments, so the file stays a plain JPEG.
constexpr uint8_t kSegmentMarker = 0xEF;
constexpr char kSegmentMarkerId[] = "FLSEG";  // + its NUL: 6 bytes
constexpr uint8_t kSegmentMarkerVersion = 2;

// Finds the embedded index: false when the header has none (any plain JPEG); true with
// `segments` filled (row-major, 2 values per row: the [K + 1, 2] index above; offsets and
// rows not yet checked against the file: decode_jpeg_rows does that). Walks the markers
// up to SOS only. Throws DecodeError for a marker that is ours but malformed (unknown
// version, a length that is no whole number of entries, a layout that is not the
// header's, tile columns out of scan order), naming the field.
bool read_embedded_segments(const uint8_t* data, size_t size, std::vector<int64_t>& segments);

// Decodes the window (full-resolution [top, left, height, width]; height/width <= 0:
// the whole image) of a prepared file at 1/scale_denom, entropy-decoding only the
// restart segments that cover its rows (plus one MCU row above and below where chroma
// is upsampled vertically) and, with column tiles, its columns (plus one MCU column on
// a side where chroma is upsampled horizontally). Same contract and result as decode_jpeg_window on the
// file: `out` holds exactly what that call would hold for the window.
void decode_jpeg_rows(const uint8_t* data, size_t size, const int64_t* segments, int64_t segment_rows, int top,
                      int left, int height, int width, int scale_denom, int channels, int64_t max_pixels,
                      DecodedWindow& out);

}  // namespace fastload
