// Lossless DCT-domain transcode of a JPEG into a prepared (restart-marked, optimised
// Huffman, baseline) file, its segment index, and the reader of prepared headers.
// Op fastload::transcode_jpeg (CPU). See transcode.h for the file and index layout.
#include "decode/transcode.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstdlib>
#include <cstring>
#include <jpeglib.h>
#include <jerror.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>

#include "check.h"
#include "decode/jpeg_errors.h"

namespace fastload {
namespace {

// Owns both libjpeg structs and the output buffer (malloc'ed by jpeg_mem_dest): freed
// on every path, including a longjmp out of libjpeg and exceptions.
class Transcoder {
 public:
  Transcoder() {
    std::memset(&src, 0, sizeof(src));
    std::memset(&dst, 0, sizeof(dst));
    install_jpeg_errors(reinterpret_cast<j_common_ptr>(&src), src_err);
    install_jpeg_errors(reinterpret_cast<j_common_ptr>(&dst), dst_err);
  }
  ~Transcoder() {
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    std::free(out);
  }
  Transcoder(const Transcoder&) = delete;
  Transcoder& operator=(const Transcoder&) = delete;

  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  JpegErrorManager src_err, dst_err;
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
};

enum class TranscodeStatus { kOk, kSourceError, kDestError, kOverLimit, kUnsentBits, kRestartTooLong, kBadTile };

bool is_marker_to_drop(const jpeg_saved_marker_ptr m) {
  // libjpeg writes JFIF and Adobe markers itself, for the colour space it writes.
  if (m->marker == JPEG_APP0 && m->data_length >= 5 && std::memcmp(m->data, "JFIF\0", 5) == 0) return true;
  if (m->marker == JPEG_APP0 + 14 && m->data_length >= 5 && std::memcmp(m->data, "Adobe", 5) == 0) return true;
  return false;
}

// libjpeg smooths the blocks of a progressive file whose scans left low-frequency AC
// bits unsent (jdcoefct.c: coefficient 0 known and some of 1..9 not fully known); a
// baseline copy of the same coefficients decodes without that smoothing.
bool has_unsent_bits(j_decompress_ptr src) {
  if (!src->progressive_mode || src->coef_bits == nullptr) return false;
  for (int ci = 0; ci < src->num_components; ++ci) {
    for (int k = 0; k < 10; ++k) {
      if (src->coef_bits[ci][k] != 0) return true;
    }
  }
  return false;
}

// Everything that touches libjpeg, under one setjmp (POD locals only). restart_rows as
// for transcode_jpeg; *mcus_per_row is set once the header is read.
TranscodeStatus run_transcode(Transcoder* t, const uint8_t* data, size_t size, int restart_rows,
                              int64_t max_pixels, JpegInfo* info, int* mcus_per_row) {
  if (setjmp(t->src_err.jump)) return TranscodeStatus::kSourceError;
  if (setjmp(t->dst_err.jump)) return TranscodeStatus::kDestError;
  jpeg_create_decompress(&t->src);
  jpeg_create_compress(&t->dst);
  jpeg_mem_src(&t->src, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&t->src, JPEG_COM, 0xFFFF);
  for (int i = 0; i < 16; ++i) jpeg_save_markers(&t->src, JPEG_APP0 + i, 0xFFFF);
  jpeg_read_header(&t->src, TRUE);
  info->height = static_cast<int>(t->src.image_height);
  info->width = static_cast<int>(t->src.image_width);
  info->components = t->src.num_components;
  info->color_space = static_cast<int>(t->src.jpeg_color_space);
  info->progressive = t->src.progressive_mode != 0;
  if (!jpeg_limit_error(data, size, *info, max_pixels).empty()) return TranscodeStatus::kOverLimit;

  jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&t->src);
  if (has_unsent_bits(&t->src)) return TranscodeStatus::kUnsentBits;

  jpeg_copy_critical_parameters(&t->src, &t->dst);  // sequential, one interleaved scan (scan_info NULL)
  t->dst.optimize_coding = TRUE;
  // The output's MCU: one block for a one-component scan, else max_h x max_v blocks.
  const int mcu_width = t->src.num_components == 1 ? 8 : 8 * t->src.max_h_samp_factor;
  *mcus_per_row = static_cast<int>((t->src.image_width + mcu_width - 1) / mcu_width);
  int tile_mcus = 0;
  if (restart_rows == kRestartTiles) {
    tile_mcus = choose_tile_mcus(*mcus_per_row, mcu_width);
    if (tile_mcus == 0) restart_rows = 1;  // no useful divisor: whole rows
  } else if (restart_rows < 0) {
    tile_mcus = -restart_rows;
    if (*mcus_per_row % tile_mcus != 0 || tile_mcus >= *mcus_per_row) return TranscodeStatus::kBadTile;
  }
  if (tile_mcus > 0) {
    t->dst.restart_interval = static_cast<unsigned int>(tile_mcus);
  } else {
    // libjpeg turns restart_in_rows into MCUs, clamped to DRI's 65535: checked below.
    t->dst.restart_in_rows = restart_rows;
  }
  jpeg_mem_dest(&t->dst, &t->out, &t->out_size);
  jpeg_write_coefficients(&t->dst, coefficients);
  for (jpeg_saved_marker_ptr m = t->src.marker_list; m != nullptr; m = m->next) {
    if (!is_marker_to_drop(m)) jpeg_write_marker(&t->dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(&t->dst);
  if (t->dst.MCUs_per_row != static_cast<unsigned int>(*mcus_per_row)) return TranscodeStatus::kDestError;
  if (tile_mcus == 0 && t->dst.restart_interval != static_cast<unsigned int>(restart_rows) * t->dst.MCUs_per_row) {
    return TranscodeStatus::kRestartTooLong;
  }
  jpeg_finish_decompress(&t->src);
  return TranscodeStatus::kOk;
}

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

// Position just past the SOS segment of a baseline file (the header's end), walking
// markers from SOI; 0 when there is none.
size_t find_header_end(const uint8_t* data, size_t size) {
  size_t i = 2;
  while (i + 4 <= size) {
    if (data[i] != 0xFF) return 0;
    const uint8_t marker = data[i + 1];
    const size_t length = be16(data + i + 2);
    if (length < 2 || i + 2 + length > size) return 0;
    if (marker == 0xDA) return i + 2 + length;
    i += 2 + length;
  }
  return 0;
}

[[noreturn]] void bad_prepared(const std::string& what) {
  throw DecodeError("expected a prepared JPEG (as transcode_jpeg writes it), got " + what);
}

}  // namespace

int choose_tile_mcus(int mcus_per_row, int mcu_width) {
  int best = 0;
  for (int k = 2; k < mcus_per_row; ++k) {
    const int px = k * mcu_width;
    if (mcus_per_row % k != 0 || px < kMinTileWidth || px > kMaxTileWidth) continue;
    if (best == 0 || std::abs(px - kTileWidth) < std::abs(best * mcu_width - kTileWidth)) best = k;
  }
  // No divisor in range (a prime number of MCUs per row: over a quarter of photo
  // widths): one-MCU tiles where an MCU is at least 16 pixels wide (subsampled chroma).
  // A restart per MCU costs ~10 % more entropy decoding per MCU read and ~2.5 bytes per
  // MCU (plus 8 of index), far less than decoding the columns beside a crop. 8-pixel
  // MCUs (4:4:4, gray) keep whole rows: a marker per block costs too much.
  if (best == 0 && mcus_per_row >= 2 && mcu_width >= 16) best = 1;
  return best;
}

PreparedLayout parse_prepared_header(const uint8_t* data, size_t size, size_t header_end) {
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) bad_prepared("data without a JPEG SOI marker");
  if (header_end > size) bad_prepared("a header end past the end of the file");
  PreparedLayout L;
  bool sof = false, sos = false;
  int comp_id[4] = {0, 0, 0, 0}, h[4] = {1, 1, 1, 1}, v[4] = {1, 1, 1, 1};
  size_t i = 2;
  while (i < header_end) {
    if (i + 4 > header_end || data[i] != 0xFF) {
      bad_prepared("a malformed marker at byte " + std::to_string(i) + " of the header");
    }
    const uint8_t marker = data[i + 1];
    const size_t length = be16(data + i + 2);
    if (length < 2 || i + 2 + length > header_end) {
      bad_prepared("a marker segment at byte " + std::to_string(i) + " that runs past the header");
    }
    const uint8_t* body = data + i + 4;
    const size_t body_len = length - 2;
    if (marker == 0xC0 || marker == 0xC1) {
      if (sof) bad_prepared("two frame headers (SOF)");
      if (body_len < 6) bad_prepared("a truncated frame header (SOF)");
      if (body[0] != 8) bad_prepared(std::to_string(body[0]) + "-bit samples (8 expected)");
      L.height = be16(body + 1);
      L.width = be16(body + 3);
      L.components = body[5];
      if (L.height == 0 || L.width == 0) bad_prepared("a frame header with a zero size");
      if (L.components < 1 || L.components > 4 || body_len != 6 + 3 * static_cast<size_t>(L.components)) {
        bad_prepared("a frame header with " + std::to_string(L.components) + " components (1 to 4 expected)");
      }
      for (int c = 0; c < L.components; ++c) {
        comp_id[c] = body[6 + 3 * c];
        h[c] = body[7 + 3 * c] >> 4;
        v[c] = body[7 + 3 * c] & 15;
        if (h[c] < 1 || h[c] > 4 || v[c] < 1 || v[c] > 4) bad_prepared("a sampling factor outside 1..4");
        L.max_h = std::max(L.max_h, h[c]);
        L.max_v = std::max(L.max_v, v[c]);
      }
      L.sof_offset = i;
      sof = true;
    } else if (marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      bad_prepared("a progressive, lossless or arithmetic-coded frame (SOF marker FF " + std::to_string(marker) +
                   "); transcode the original with transcode_jpeg");
    } else if (marker == 0xDD) {
      if (body_len != 2) bad_prepared("a malformed restart interval (DRI)");
      L.restart_interval = be16(body);
    } else if (marker == 0xDA) {
      if (!sof) bad_prepared("a scan before the frame header");
      if (i + 2 + length != header_end) bad_prepared("a scan header that does not end where the index says");
      if (body_len < 1 || body[0] != L.components || body_len != 4 + 2 * static_cast<size_t>(body[0])) {
        bad_prepared("a scan without every component (one interleaved scan expected)");
      }
      for (int c = 0; c < L.components; ++c) {
        if (body[1 + 2 * c] != comp_id[c]) bad_prepared("a scan whose components are not the frame's, in order");
      }
      sos = true;
    } else if (marker == 0xD8 || marker == 0xD9 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01 ||
               marker == 0x00 || marker == 0xFF) {
      bad_prepared("a stray marker FF " + std::to_string(marker) + " in the header");
    }
    i += 2 + length;
  }
  if (!sos) bad_prepared("no scan header (SOS) where the index says the header ends");
  if (L.restart_interval == 0) bad_prepared("no restart interval (DRI)");
  if (L.components == 1) {
    // One component: its MCU is one block of its own (full-resolution) grid.
    L.mcu_height = 8;
    L.mcu_width = 8;
    L.mcus_per_row = (L.width + 7) / 8;
    L.mcu_rows = (L.height + 7) / 8;
    L.vertical_upsampling = false;
    L.horizontal_upsampling = false;
  } else {
    int blocks = 0;
    for (int c = 0; c < L.components; ++c) {
      blocks += h[c] * v[c];
      if (v[c] != L.max_v) L.vertical_upsampling = true;
      if (h[c] != L.max_h) L.horizontal_upsampling = true;
    }
    if (blocks > 10) bad_prepared("more than 10 blocks per MCU");
    L.mcu_height = 8 * L.max_v;
    L.mcu_width = 8 * L.max_h;
    L.mcus_per_row = (L.width + L.mcu_width - 1) / L.mcu_width;
    L.mcu_rows = (L.height + L.mcu_height - 1) / L.mcu_height;
  }
  if (L.restart_interval % L.mcus_per_row == 0) {
    L.restart_rows = L.restart_interval / L.mcus_per_row;
    L.tiles_per_row = 1;
  } else if (L.mcus_per_row % L.restart_interval == 0) {
    L.restart_rows = 1;
    L.tiles_per_row = L.mcus_per_row / L.restart_interval;
  } else {
    bad_prepared("a restart interval of " + std::to_string(L.restart_interval) +
                 " MCUs, neither a whole number of MCU rows of " + std::to_string(L.mcus_per_row) +
                 " MCUs nor a divisor of one");
  }
  L.header_end = header_end;
  return L;
}

PreparedLayout check_segments(const uint8_t* data, size_t size, const int64_t* seg, int64_t rows) {
  auto bad = [](const std::string& what) {
    throw DecodeError("expected segments that match the prepared file (as transcode_jpeg returned them), got " +
                      what + ". Re-create the index with transcode_jpeg (a file from fastload.prepare: prepare the dataset again)");
  };
  if (rows < 2) bad(std::to_string(rows) + " rows (at least 2: one segment and the end row)");
  if (seg[0] <= 0 || static_cast<uint64_t>(seg[0]) >= size) {
    bad("a first offset of " + std::to_string(seg[0]) + " outside the " + std::to_string(size) + "-byte file");
  }
  const PreparedLayout L = parse_prepared_header(data, size, static_cast<size_t>(seg[0]));
  const int64_t K = rows - 1;
  const int64_t tiles = L.tiles_per_row;
  const int64_t expected_k =
      tiles > 1 ? static_cast<int64_t>(L.mcu_rows) * tiles : (L.mcu_rows + L.restart_rows - 1) / L.restart_rows;
  if (K != expected_k) {
    bad(std::to_string(K) + " segments for a file of " + std::to_string(L.mcu_rows) + " MCU rows with " +
        (tiles > 1 ? std::to_string(tiles) + " tiles per MCU row" :
                     "a restart every " + std::to_string(L.restart_rows) + " MCU rows") +
        " (" + std::to_string(expected_k) + " expected)");
  }
  for (int64_t k = 0; k <= K; ++k) {
    const int64_t offset = seg[2 * k], row = seg[2 * k + 1];
    const int64_t want_row = k < K ? (tiles > 1 ? k / tiles : k * L.restart_rows) : L.mcu_rows;
    if (row != want_row) {
      bad("MCU row " + std::to_string(row) + " in row " + std::to_string(k) + " (" + std::to_string(want_row) +
          " expected)");
    }
    if (k == 0) continue;
    const int64_t prev = seg[2 * (k - 1)];
    if (offset < prev + 2 || static_cast<uint64_t>(offset) > size) {
      bad("offset " + std::to_string(offset) + " in row " + std::to_string(k) + " (offsets must increase and lie in the " +
          std::to_string(size) + "-byte file; the previous is " + std::to_string(prev) + ")");
    }
    const uint8_t want = k < K ? static_cast<uint8_t>(0xD0 + ((k - 1) & 7)) : 0xD9;
    if (data[offset - 2] != 0xFF || data[offset - 1] != want) {
      bad("no " + std::string(k < K ? "RST" + std::to_string((k - 1) & 7) : std::string("EOI")) +
          " marker before offset " + std::to_string(offset) + " (row " + std::to_string(k) + ")");
    }
  }
  return L;
}

TranscodedJpeg transcode_jpeg(const uint8_t* data, size_t size, int restart_rows, int64_t max_pixels) {
  if (restart_rows == 0 || restart_rows > kMaxRestartRows || restart_rows < -65535) {
    throw std::invalid_argument("expected restart_rows in 1.." + std::to_string(kMaxRestartRows) + ", got " +
                                std::to_string(restart_rows) + " (or -1: column tiles; -k: tiles of k MCUs)");
  }
  if (size == 0) throw DecodeError("expected a JPEG, got 0 bytes (empty file)");
  if (!is_jpeg(data, size)) throw DecodeError("expected a JPEG (starting with FF D8 FF)");
  Transcoder t;
  JpegInfo info;
  int mcus_per_row = 0;
  switch (run_transcode(&t, data, size, restart_rows, max_pixels, &info, &mcus_per_row)) {
    case TranscodeStatus::kOk:
      break;
    case TranscodeStatus::kSourceError:
      throw DecodeError(std::string("expected a decodable JPEG, got corrupt, truncated or unsupported data (libjpeg: ") +
                        t.src_err.message + ")");
    case TranscodeStatus::kDestError:
      throw DecodeError(std::string("could not write the transcoded JPEG (libjpeg: ") + t.dst_err.message + ")");
    case TranscodeStatus::kOverLimit:
      throw DecodeError(jpeg_limit_error(data, size, info, max_pixels));
    case TranscodeStatus::kUnsentBits:
      throw DecodeError(
          "expected a progressive JPEG whose scans send every coefficient bit, got one that stops early "
          "(libjpeg smooths such images when decoding, which a baseline copy cannot reproduce). Keep the "
          "original file");
    case TranscodeStatus::kRestartTooLong:
      throw DecodeError("expected an image narrow enough for a restart every " + std::to_string(restart_rows) +
                        " MCU rows (at most 65535 MCUs), got a " + std::to_string(info.width) +
                        "-pixel-wide one. Use a smaller restart_rows");
    case TranscodeStatus::kBadTile:
      throw std::invalid_argument("expected tiles of " + std::to_string(-restart_rows) +
                                  " MCUs to divide the image's " + std::to_string(mcus_per_row) +
                                  " MCUs per row into two or more, got " + std::to_string(info.width) +
                                  " pixels. Use -1 (tiles chosen by the transcoder)");
  }
  const uint8_t* out = t.out;
  const size_t out_size = t.out_size;
  const size_t header_end = find_header_end(out, out_size);
  if (header_end == 0) throw DecodeError("libjpeg wrote a JPEG without a scan header");
  const PreparedLayout L = parse_prepared_header(out, out_size, header_end);

  // Segment starts: just past each RSTn marker in the entropy-coded data (0xFF is
  // always followed by a stuffed 0x00 there, except in markers).
  TranscodedJpeg result;
  result.segments.reserve(2 * (static_cast<size_t>(L.mcu_rows / L.restart_rows) + 2));
  result.segments.push_back(static_cast<int64_t>(header_end));
  result.segments.push_back(0);
  int64_t k = 0;
  size_t i = header_end;
  size_t end = 0;
  while (i + 1 < out_size) {
    const void* next = std::memchr(out + i, 0xFF, out_size - 1 - i);
    if (next == nullptr) break;
    i = static_cast<size_t>(static_cast<const uint8_t*>(next) - out);
    const uint8_t m = out[i + 1];
    if (m == 0x00) {
      i += 2;
    } else if (m >= 0xD0 && m <= 0xD7) {
      ++k;
      if (m != 0xD0 + ((k - 1) & 7)) throw DecodeError("libjpeg wrote restart markers out of sequence");
      result.segments.push_back(static_cast<int64_t>(i + 2));
      result.segments.push_back(L.tiles_per_row > 1 ? k / L.tiles_per_row : k * L.restart_rows);
      i += 2;
    } else {
      if (m != 0xD9 || i + 2 != out_size) throw DecodeError("libjpeg wrote more than one scan");
      end = i + 2;
      break;
    }
  }
  if (end == 0) throw DecodeError("libjpeg wrote a scan without an EOI marker");
  result.segments.push_back(static_cast<int64_t>(end));
  result.segments.push_back(L.mcu_rows);
  const int64_t rows = static_cast<int64_t>(result.segments.size() / 2);
  check_segments(out, out_size, result.segments.data(), rows);  // the index is what the reader expects
  result.data.assign(out, out + out_size);
  return result;
}

// ---- op ---------------------------------------------------------------------------
namespace {

std::tuple<at::Tensor, at::Tensor> transcode_jpeg_op(const at::Tensor& data, int64_t restart_rows,
                                                     int64_t max_pixels) {
  constexpr const char* op = "transcode_jpeg";
  FASTLOAD_CHECK(data.device().is_cpu() && data.scalar_type() == at::kByte && data.dim() == 1 && data.is_contiguous(),
                 op, "expected the JPEG's bytes as a contiguous 1-D uint8 CPU tensor, got ", data.scalar_type(),
                 " of shape ", data.sizes(), " on ", data.device(),
                 ". Use torch.frombuffer(bytearray(b), dtype=torch.uint8).");
  FASTLOAD_CHECK_VALUE(restart_rows != 0 && restart_rows <= kMaxRestartRows && restart_rows >= -65535, op,
                       "expected restart_rows in 1..", kMaxRestartRows, ", got ", restart_rows,
                       " (or -1: column tiles chosen by the transcoder; -k: tiles of k MCUs).");
  TranscodedJpeg t;
  try {
    t = transcode_jpeg(data.data_ptr<uint8_t>(), static_cast<size_t>(data.numel()), static_cast<int>(restart_rows),
                       max_pixels);
  } catch (const DecodeError& e) {
    FASTLOAD_CHECK(false, op, e.what(), ". Fix or remove the file.");
  } catch (const std::invalid_argument& e) {
    FASTLOAD_CHECK_VALUE(false, op, e.what(), ".");
  }
  at::Tensor jpeg = at::empty({static_cast<int64_t>(t.data.size())}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(jpeg.data_ptr<uint8_t>(), t.data.data(), t.data.size());
  const int64_t rows = static_cast<int64_t>(t.segments.size() / 2);
  at::Tensor segments = at::empty({rows, 2}, at::TensorOptions().dtype(at::kLong));
  std::memcpy(segments.data_ptr<int64_t>(), t.segments.data(), t.segments.size() * sizeof(int64_t));
  return {jpeg, segments};
}

}  // namespace


TORCH_LIBRARY_IMPL(fastload, CPU, m) { m.impl("transcode_jpeg", &transcode_jpeg_op); }

}  // namespace fastload
