// Prepared JPEGs: a lossless DCT-domain transcode that makes a JPEG partially decodable,
// and the partial decode of the rows a crop window needs.
//
// Stage: decode (and the one-time preparation of a dataset). Input: the bytes of one
// JPEG. Output: the prepared file and its segment index; later, uint8 HWC pixels of a
// window of it, bit-identical to decoding the original file and cropping.
//
// The prepared file is a baseline (sequential, Huffman, one interleaved scan) JPEG
// with the original's DCT coefficients, optimised Huffman tables, and a restart marker
// every `restart_rows` MCU rows. A restart resets the DC predictors, so each restart
// segment decodes on its own: a window's rows need only the segments covering them.
//
// The segment index (int64 [K + 1, 2], K = number of restart segments):
//   row k < K: (byte offset in the file where segment k's entropy-coded data begins,
//               first MCU row of the scan that segment k covers) -- k * restart_rows;
//   row K:     (file offset just past the scan's terminating EOI marker, MCU rows of the scan).
// Segment k's entropy-coded bytes are file[seg[k][0] : seg[k+1][0] - 2]; the two bytes
// after them are its terminating marker (RST((k) mod 8) for k < K-1, EOI for the last).
// file[0 : seg[0][0]] is the header, up to and including the SOS segment.
// An MCU row is mcu_height pixel rows: 8 * max_v_samp_factor for a multi-component
// (interleaved) scan, 8 for a one-component file (its MCU is one 8x8 block).
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
// which a baseline copy cannot reproduce).
TranscodedJpeg transcode_jpeg(const uint8_t* data, size_t size, int restart_rows, int64_t max_pixels);

// The geometry of a prepared file, read from its header (no libjpeg involved).
struct PreparedLayout {
  int height = 0, width = 0;
  int components = 0;
  int max_h = 1, max_v = 1;        // sampling factors
  bool vertical_upsampling = false;  // some component has v < max_v: fancy upsampling reads the rows around
  int mcu_height = 8;              // pixel rows per MCU row
  int mcus_per_row = 0;
  int mcu_rows = 0;                // MCU rows in the scan
  int restart_interval = 0;        // DRI, in MCUs
  int restart_rows = 0;            // restart_interval / mcus_per_row
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
// marker segment among the header's markers,
//   FF EF <length u16> "FLSEG" 00 <version u8 = 1> then K + 1 pairs (u32 BE offset, u32 BE MCU row),
// the rows of the int64 [K + 1, 2] index above, offsets counted in the file as stored
// (marker included). Other decoders skip APPn segments, so the file stays a plain JPEG.
constexpr uint8_t kSegmentMarker = 0xEF;
constexpr char kSegmentMarkerId[] = "FLSEG";  // + its NUL: 6 bytes
constexpr uint8_t kSegmentMarkerVersion = 1;

// Finds the embedded index: false when the header has none (any plain JPEG); true with
// `segments` filled (row-major, 2 values per row, not yet checked against the file:
// decode_jpeg_rows does that). Walks the markers up to SOS only. Throws DecodeError for a
// marker that is ours but malformed (wrong version or length).
bool read_embedded_segments(const uint8_t* data, size_t size, std::vector<int64_t>& segments);

// Decodes the window (full-resolution [top, left, height, width]; height/width <= 0:
// the whole image) of a prepared file at 1/scale_denom, entropy-decoding only the
// restart segments that cover its rows (plus one MCU row above and below where chroma
// is upsampled vertically). Same contract and result as decode_jpeg_window on the
// file: `out` holds exactly what that call would hold for the window.
void decode_jpeg_rows(const uint8_t* data, size_t size, const int64_t* segments, int64_t segment_rows, int top,
                      int left, int height, int width, int scale_denom, int channels, int64_t max_pixels,
                      DecodedWindow& out);

}  // namespace fastload
