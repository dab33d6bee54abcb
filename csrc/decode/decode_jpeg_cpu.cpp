// JPEG decoding on the CPU with libjpeg-turbo: header, crop window, DCT scaling, and the
// fastload::jpeg_header / fastload::decode_jpeg ops. See decode_jpeg.h and README.md.
#include "decode/decode_jpeg.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstring>
#include <jpeglib.h>
#include <jerror.h>  // JWRN_* warning codes

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "check.h"
#include "decode/jpeg_errors.h"

namespace fastload {
namespace {

struct ProgressManager {
  jpeg_progress_mgr pub;  // first member: libjpeg sees ProgressManager* as jpeg_progress_mgr*
  JpegErrorManager* err;
};

extern "C" void on_progress(j_common_ptr cinfo) {
  auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  // Scans are counted from the markers before decoding (jpeg_limit_error); this catches
  // whatever that walk missed.
  if (dinfo->input_scan_number > kMaxProgressiveScans) {
    char buffer[128];
    std::snprintf(buffer, sizeof(buffer), "more than %d progressive scans (crafted file?)", kMaxProgressiveScans);
    jpeg_fail(cinfo, buffer);
  }
}

// jpeg_crop_scanline before libjpeg-turbo 3.0.1 sets each component's downsampled width
// to ceil(output_width * h_samp / max_h_samp), ignoring that DCT scaling may give a
// component a larger DCT_scaled_size than the luma's (libjpeg-turbo does so to upsample
// less). Where that component still needs upsampling (4x2 or 2x4 luma with 1x1 chroma at
// 1/2, 1/4, 1/8), the upsampler then reads a too-narrow chroma row and the crop's pixels
// are wrong (by up to ~250 levels). Fixed upstream in 3.0.1 by scaling that width by
// DCT_scaled_size / min_DCT_scaled_size. True when this decode would hit it: the caller
// then decodes full-width rows and crops in memory. Called after jpeg_start_decompress
// (which sets the scaled sizes). The version is the headers' (jconfig.h): libjpeg.so.62
// does not report its own at run time; an older run-time library than the headers
// would bring the bug back, which test_window_of_every_luma_sampling_matches_full_decode
// catches on that install.
bool crop_scanline_miscomputes_width(j_decompress_ptr cinfo) {
#if defined(LIBJPEG_TURBO_VERSION_NUMBER) && LIBJPEG_TURBO_VERSION_NUMBER >= 3000001
  (void)cinfo;
  return false;
#else
  for (int ci = 0; ci < cinfo->num_components; ++ci) {
    const jpeg_component_info& comp = cinfo->comp_info[ci];
#if JPEG_LIB_VERSION >= 70
    const int size_h = comp.DCT_h_scaled_size, size_v = comp.DCT_v_scaled_size;
    const int min_h = cinfo->min_DCT_h_scaled_size, min_v = cinfo->min_DCT_v_scaled_size;
#else
    const int size_h = comp.DCT_scaled_size, size_v = comp.DCT_scaled_size;
    const int min_h = cinfo->min_DCT_scaled_size, min_v = cinfo->min_DCT_scaled_size;
#endif
    if (size_h == min_h) continue;  // the old and the fixed width agree
    const bool upsampled = comp.h_samp_factor * size_h != cinfo->max_h_samp_factor * min_h ||
                           comp.v_samp_factor * size_v != cinfo->max_v_samp_factor * min_v;
    if (upsampled) return true;
  }
  return false;
#endif
}

// Owns one jpeg_decompress_struct: destroyed on every path, including exceptions.
class Decompressor {
 public:
  Decompressor() {
    // Zeroed first: jpeg_destroy_decompress is then safe even if creation failed.
    std::memset(&cinfo, 0, sizeof(cinfo));
    std::memset(&err, 0, sizeof(err));
    std::memset(&progress, 0, sizeof(progress));
    install_jpeg_errors(reinterpret_cast<j_common_ptr>(&cinfo), err);
    progress.pub.progress_monitor = on_progress;
    progress.err = &err;
  }
  ~Decompressor() { jpeg_destroy_decompress(&cinfo); }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  ProgressManager progress;
};

// What run_libjpeg() decodes: a window in scaled pixels, already clamped. POD.
struct Request {
  const uint8_t* data;
  size_t size;
  bool header_only;
  int top, left, height, width;  // full-resolution window; height/width <= 0: whole image
  int scale_denom;
  int channels;
  int64_t max_pixels;
};

enum class Status { kOk, kLibjpegError, kOverLimit, kEmptyWindow };

enum class Limit { kNone, kPixels, kScans };

// Which decompression-bomb limit the file exceeds, if any (jpeg_limit_error words it).
// Allocates nothing, so run_libjpeg's frame stays free of C++ objects.
Limit exceeded_limit(const uint8_t* data, size_t size, const JpegInfo& info, int64_t max_pixels) {
  if (max_pixels > 0 && static_cast<int64_t>(info.height) * info.width > max_pixels) return Limit::kPixels;
  if (info.progressive && count_jpeg_scans(data, size, kMaxProgressiveScans) > kMaxProgressiveScans) {
    return Limit::kScans;
  }
  return Limit::kNone;
}

// Pillow's CMYK -> RGB after its "CMYK;I" unpacking (Adobe files store inverted ink):
// ink = 255 - raw; r = (255 - ink_k) - ink_c * (255 - ink_k) / 255 (rounded like
// Pillow's MULDIV255). Written in raw values: nk = raw_k, ink_c = 255 - raw_c.
inline uint8_t cmyk_channel(int raw_c, int raw_k) {
  const int tmp = (255 - raw_c) * raw_k + 128;
  const int v = raw_k - (((tmp >> 8) + tmp) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Pillow's RGB -> L (ITU-R 601-2 luma, 16-bit fixed point), for CMYK files with channels=1.
inline uint8_t pillow_luma(int r, int g, int b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

void convert_cmyk_row(const JSAMPLE* in, uint8_t* out, int width, int channels) {
  for (int x = 0; x < width; ++x, in += 4) {
    const uint8_t r = cmyk_channel(in[0], in[3]);
    const uint8_t g = cmyk_channel(in[1], in[3]);
    const uint8_t b = cmyk_channel(in[2], in[3]);
    if (channels == 3) {
      out[0] = r;
      out[1] = g;
      out[2] = b;
      out += 3;
    } else {
      *out++ = pillow_luma(r, g, b);
    }
  }
}

// Everything that touches libjpeg runs here, under one setjmp. Only POD locals live in
// this frame, and nothing read after a longjmp is modified after setjmp (no volatile
// needed): on error it returns kLibjpegError with d->err.message set. It may throw
// std::bad_alloc from out->pixels.resize(), outside any libjpeg call, which unwinds
// normally. On success `info` (and `out` unless header_only) are filled.
Status run_libjpeg(Decompressor* d, const Request* req, JpegInfo* info, DecodedWindow* out) {
  j_decompress_ptr cinfo = &d->cinfo;
  if (setjmp(d->err.jump)) return Status::kLibjpegError;

  jpeg_create_decompress(cinfo);
  cinfo->progress = &d->progress.pub;
  jpeg_mem_src(cinfo, req->data, static_cast<unsigned long>(req->size));
  jpeg_read_header(cinfo, TRUE);
  info->height = static_cast<int>(cinfo->image_height);
  info->width = static_cast<int>(cinfo->image_width);
  info->components = cinfo->num_components;
  info->color_space = static_cast<int>(cinfo->jpeg_color_space);
  info->progressive = cinfo->progressive_mode != 0;
  if (req->header_only) return Status::kOk;

  // Decompression bombs: refuse before anything is allocated for the pixels.
  if (exceeded_limit(req->data, req->size, *info, req->max_pixels) != Limit::kNone) return Status::kOverLimit;

  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  if (cmyk) {
    cinfo->out_color_space = JCS_CMYK;  // libjpeg turns YCCK into CMYK; we do CMYK -> RGB
  } else if (req->channels == 1) {
    cinfo->out_color_space = JCS_GRAYSCALE;  // Y of YCbCr (chroma is not even decoded)
  } else {
    cinfo->out_color_space = JCS_RGB;  // gray is replicated, as PIL's convert("RGB")
  }
  // libjpeg's defaults, set explicitly: they make full decodes bit-identical to PIL's.
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(req->scale_denom);

  jpeg_start_decompress(cinfo);
  const int d_ = req->scale_denom;
  const int full_h = static_cast<int>(cinfo->image_height);
  const int full_w = static_cast<int>(cinfo->image_width);
  const int scaled_h = static_cast<int>(cinfo->output_height);  // ceil(full / d)
  const int scaled_w = static_cast<int>(cinfo->output_width);

  // The window in full-resolution pixels, clamped, then in scaled pixels with edges
  // rounded outwards: rows floor(top / d) .. ceil(bottom / d).
  int top = std::max(req->top, 0), left = std::max(req->left, 0);
  int bottom = req->height > 0 ? std::min(req->top + req->height, full_h) : full_h;
  int right = req->width > 0 ? std::min(req->left + req->width, full_w) : full_w;
  if (req->height <= 0) top = 0;
  if (req->width <= 0) left = 0;
  if (top >= bottom || left >= right) return Status::kEmptyWindow;
  const int s_top = top / d_;
  const int s_bottom = std::min((bottom + d_ - 1) / d_, scaled_h);
  const int s_left = left / d_;
  const int s_right = std::min((right + d_ - 1) / d_, scaled_w);

  // Columns: jpeg_crop_scanline widens the crop to iMCU boundaries and then upsamples
  // the chroma as if the crop were the whole image, so its first and last columns can
  // differ from a full decode (fancy upsampling reads the neighbouring chroma sample).
  // Ask for one more column on each side and drop the crop's edge columns afterwards:
  // every column we return is then bit-identical to the full decode. libjpeg also
  // switches from fancy to box upsampling when a component is at most 2 samples wide,
  // so the crop is kept wider than 2 chroma samples (2 * max_h_samp_factor pixels).
  // Where libjpeg's crop is broken (see crop_scanline_miscomputes_width), whole rows are
  // decoded into a scratch row and only the window's columns are kept.
  int x0 = 0, x1 = scaled_w;  // decoded columns
  int keep0 = 0, keep1 = scaled_w;  // exact columns among them
  const bool cropped = s_left > 0 || s_right < scaled_w;
  const bool crop_in_memory = cropped && crop_scanline_miscomputes_width(cinfo);
  if (crop_in_memory) {
    keep0 = s_left;
    keep1 = s_right;
  } else if (cropped) {
    int want0 = std::max(s_left - 1, 0);
    int want1 = std::min(s_right + 1, scaled_w);
    const int min_width = std::min(2 * cinfo->max_h_samp_factor + 1, scaled_w);
    if (want1 - want0 < min_width) {
      want1 = std::min(want0 + min_width, scaled_w);
      want0 = want1 - min_width;
    }
    JDIMENSION xoffset = static_cast<JDIMENSION>(want0);
    JDIMENSION cwidth = static_cast<JDIMENSION>(want1 - want0);
    jpeg_crop_scanline(cinfo, &xoffset, &cwidth);
    x0 = static_cast<int>(xoffset);
    x1 = x0 + static_cast<int>(cwidth);
    keep0 = x0 > 0 ? x0 + 1 : 0;
    keep1 = x1 < scaled_w ? x1 - 1 : scaled_w;
  }
  const int decoded_w = x1 - x0;
  const int keep_w = keep1 - keep0;
  const int rows = s_bottom - s_top;
  const int ch = req->channels;

  out->channels = ch;
  out->scale_denom = d_;
  out->scaled_height = scaled_h;
  out->scaled_width = scaled_w;
  out->top = s_top;
  out->left = keep0;
  out->height = rows;
  out->width = keep_w;
  // Room for the decoded (wider) rows; compacted to keep_w in place below.
  const size_t decoded_stride = static_cast<size_t>(decoded_w) * ch;
  const size_t keep_stride = static_cast<size_t>(keep_w) * ch;
  out->pixels.resize(static_cast<size_t>(rows) * (crop_in_memory ? keep_stride : decoded_stride));

  // Rows above the window: skipped (entropy-decoded only where libjpeg must; no IDCT).
  if (s_top > 0) {
    if (jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(s_top)) != static_cast<JDIMENSION>(s_top)) {
      jpeg_fail(reinterpret_cast<j_common_ptr>(cinfo), "could not skip to the first row of the window");
    }
  }
  uint8_t* base = out->pixels.data();
  if (cmyk) {
    // libjpeg's pool memory: freed by jpeg_destroy_decompress, no C++ object here.
    JSAMPARRAY scratch = (*cinfo->mem->alloc_sarray)(
        reinterpret_cast<j_common_ptr>(cinfo), JPOOL_IMAGE, static_cast<JDIMENSION>(decoded_w) * 4, 1);
    for (int y = 0; y < rows; ++y) {
      if (jpeg_read_scanlines(cinfo, scratch, 1) != 1) {
        jpeg_fail(reinterpret_cast<j_common_ptr>(cinfo), "libjpeg returned no scanline");
      }
      convert_cmyk_row(scratch[0] + static_cast<size_t>(keep0 - x0) * 4, base + static_cast<size_t>(y) * keep_w * ch,
                       keep_w, ch);
    }
  } else if (crop_in_memory) {
    JSAMPARRAY scratch = (*cinfo->mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(cinfo), JPOOL_IMAGE,
                                                     static_cast<JDIMENSION>(decoded_stride), 1);
    for (int y = 0; y < rows; ++y) {
      if (jpeg_read_scanlines(cinfo, scratch, 1) != 1) {
        jpeg_fail(reinterpret_cast<j_common_ptr>(cinfo), "libjpeg returned no scanline");
      }
      std::memcpy(base + static_cast<size_t>(y) * keep_stride, scratch[0] + static_cast<size_t>(keep0) * ch,
                  keep_stride);
    }
  } else {
    for (int y = 0; y < rows; ++y) {
      JSAMPROW row = base + static_cast<size_t>(y) * decoded_stride;
      if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
        jpeg_fail(reinterpret_cast<j_common_ptr>(cinfo), "libjpeg returned no scanline");
      }
    }
    if (keep_w != decoded_w) {
      // In place, front to back: row y's destination ends before row y+1's source begins.
      const size_t offset = static_cast<size_t>(keep0 - x0) * ch;
      for (int y = 0; y < rows; ++y) {
        std::memmove(base + y * keep_stride, base + y * decoded_stride + offset, keep_stride);
      }
    }
  }
  out->pixels.resize(static_cast<size_t>(rows) * keep_w * ch);
  // The rows below the window are never read: stop here instead of finishing the file.
  jpeg_abort_decompress(cinfo);
  return Status::kOk;
}

std::string libjpeg_error(const Decompressor& d) {
  return std::string("expected a decodable JPEG, got corrupt, truncated or unsupported data (libjpeg: ") + d.err.message + ")";
}

// Throws DecodeError for data that cannot be a JPEG, before libjpeg sees it.
void check_jpeg_bytes(const uint8_t* data, size_t size) {
  if (size == 0) throw DecodeError("expected a JPEG, got 0 bytes (empty file)");
  if (!is_jpeg(data, size)) {
    throw DecodeError("expected a JPEG (starting with FF D8 FF), got " + describe_prefix(data, size));
  }
}

}  // namespace

int count_jpeg_scans(const uint8_t* data, size_t size, int stop_after) {
  int scans = 0;
  size_t i = 2;  // after SOI
  while (i + 1 < size) {
    if (data[i] != 0xFF) {  // junk between markers (libjpeg skips it too) or scan data
      const void* next = std::memchr(data + i, 0xFF, size - i);
      if (next == nullptr) break;
      i = static_cast<size_t>(static_cast<const uint8_t*>(next) - data);
      continue;
    }
    const uint8_t marker = data[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    // Stuffed zero, RSTn, TEM: no segment, part of or between entropy-coded data.
    if (marker == 0x00 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {
      i += 2;
      continue;
    }
    if (marker == 0xD9) break;  // EOI
    if (i + 3 >= size) break;
    const size_t length = (static_cast<size_t>(data[i + 2]) << 8) | data[i + 3];
    if (length < 2) {  // libjpeg skips such a segment's length bytes and reads on: so does the count
      i += 4;
      continue;
    }
    if (marker == 0xDA && ++scans > stop_after) break;
    i += 2 + length;  // the scan data after an SOS is walked byte by byte above
  }
  return scans;
}

std::string jpeg_limit_error(const uint8_t* data, size_t size, const JpegInfo& info, int64_t max_pixels) {
  switch (exceeded_limit(data, size, info, max_pixels)) {
    case Limit::kPixels:
      return "expected at most " + std::to_string(max_pixels) + " pixels, got a " + std::to_string(info.height) +
             "x" + std::to_string(info.width) + " image (" +
             std::to_string(static_cast<int64_t>(info.height) * info.width) +
             " pixels; a decompression bomb?). If the file is trusted, raise max_pixels (<= 0 disables the limit)";
    case Limit::kScans:
      return "expected at most " + std::to_string(kMaxProgressiveScans) +
             " scans in a progressive JPEG, got more (a decompression bomb?: decoding cost grows with every "
             "scan; real encoders write about 10). Re-encode the file";
    case Limit::kNone:
      break;
  }
  return "";
}

JpegInfo read_jpeg_info(const uint8_t* data, size_t size) {
  check_jpeg_bytes(data, size);
  Decompressor d;
  Request req{data, size, /*header_only=*/true, 0, 0, 0, 0, 1, 3, 0};
  JpegInfo info;
  if (run_libjpeg(&d, &req, &info, nullptr) != Status::kOk) throw DecodeError(libjpeg_error(d));
  return info;
}

void decode_jpeg_window(const uint8_t* data, size_t size, int top, int left, int height, int width,
                        int scale_denom, int channels, int64_t max_pixels, DecodedWindow& out) {
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8) {
    throw std::invalid_argument("expected scale_denom 1, 2, 4 or 8, got " + std::to_string(scale_denom));
  }
  if (channels != 1 && channels != 3) {
    throw std::invalid_argument("expected channels 1 or 3, got " + std::to_string(channels));
  }
  check_jpeg_bytes(data, size);
  Decompressor d;
  Request req{data, size, false, top, left, height, width, scale_denom, channels, max_pixels};
  JpegInfo info;
  switch (run_libjpeg(&d, &req, &info, &out)) {
    case Status::kOk:
      return;
    case Status::kLibjpegError:
      throw DecodeError(libjpeg_error(d));
    case Status::kOverLimit:
      throw DecodeError(jpeg_limit_error(data, size, info, max_pixels));
    case Status::kEmptyWindow:
      throw std::invalid_argument("expected a window inside the " + std::to_string(info.height) + "x" +
                                  std::to_string(info.width) + " image, got [top=" + std::to_string(top) +
                                  ", left=" + std::to_string(left) + ", height=" + std::to_string(height) +
                                  ", width=" + std::to_string(width) + "]");
  }
}

int choose_scale_denom(int crop_h, int crop_w, int out_h, int out_w) {
  for (int d : {8, 4, 2}) {
    // ceil(crop / d) >= out in both dimensions (out <= 0 constrains nothing), and at least
    // one whole scaled pixel: a crop of fewer than d pixels (a 1x1 RandomCrop) would read
    // the average of a d x d block, not its own pixels.
    if ((crop_h + d - 1) / d >= out_h && (crop_w + d - 1) / d >= out_w && crop_h >= d && crop_w >= d) return d;
  }
  return 1;
}

// ---- ops ----------------------------------------------------------------------------
namespace {

void check_data(const at::Tensor& data, const char* op) {
  FASTLOAD_CHECK(data.device().is_cpu(), op, "expected the JPEG bytes on the CPU, got a tensor on ",
                 data.device(), ". Pass the file's bytes as a CPU tensor.");
  FASTLOAD_CHECK(data.scalar_type() == at::kByte, op, "expected uint8 bytes, got dtype ", data.scalar_type(),
                 ". Use torch.frombuffer(bytearray(b), dtype=torch.uint8).");
  FASTLOAD_CHECK(data.dim() == 1, op, "expected a 1-D tensor of bytes, got shape ", data.sizes(),
                 ". Flatten it first.");
  FASTLOAD_CHECK(data.is_contiguous(), op, "expected contiguous bytes, got strides ", data.strides(),
                 ". Call .contiguous() first.");
  FASTLOAD_CHECK(data.numel() > 0, op, "expected a JPEG, got 0 bytes. The file is empty: re-create or remove it.");
}

at::Tensor jpeg_header_op(const at::Tensor& data) {
  constexpr const char* op = "jpeg_header";
  check_data(data, op);
  JpegInfo info;
  try {
    info = read_jpeg_info(data.data_ptr<uint8_t>(), static_cast<size_t>(data.numel()));
  } catch (const DecodeError& e) {
    FASTLOAD_CHECK(false, op, e.what(), ". Fix or remove the file.");
  }
  at::Tensor header = at::empty({5}, at::kLong);
  const int64_t values[5] = {info.height, info.width, info.components, info.color_space, info.progressive ? 1 : 0};
  std::copy(values, values + 5, header.data_ptr<int64_t>());
  return header;
}

at::Tensor decode_jpeg_op(const at::Tensor& data, c10::IntArrayRef window, int64_t scale_denom, int64_t channels,
                          int64_t max_pixels) {
  constexpr const char* op = "decode_jpeg";
  check_data(data, op);
  FASTLOAD_CHECK_VALUE(scale_denom == 1 || scale_denom == 2 || scale_denom == 4 || scale_denom == 8, op,
                       "expected scale_denom 1, 2, 4 or 8, got ", scale_denom,
                       ". libjpeg-turbo's other scales take slow paths; resize afterwards instead.");
  FASTLOAD_CHECK_VALUE(channels == 1 || channels == 3, op, "expected channels 1 (luma) or 3 (RGB), got ",
                       channels, ".");
  FASTLOAD_CHECK_VALUE(window.empty() || window.size() == 4, op,
                       "expected window [] or [top, left, height, width], got ", window.size(), " values.");
  const auto* bytes = data.data_ptr<uint8_t>();
  const auto size = static_cast<size_t>(data.numel());
  int top = 0, left = 0, height = 0, width = 0;
  auto out = std::make_unique<DecodedWindow>();
  try {
    if (!window.empty()) {
      // Validated against the header: a window must lie inside the image.
      const JpegInfo info = read_jpeg_info(bytes, size);
      FASTLOAD_CHECK_VALUE(window[0] >= 0 && window[1] >= 0 && window[2] > 0 && window[3] > 0 &&
                               window[0] + window[2] <= info.height && window[1] + window[3] <= info.width,
                           op, "expected a window [top, left, height, width] inside the ", info.height, "x",
                           info.width, " image with height, width > 0, got ", window,
                           ". Clamp the crop to the image size (see jpeg_header).");
      top = static_cast<int>(window[0]);
      left = static_cast<int>(window[1]);
      height = static_cast<int>(window[2]);
      width = static_cast<int>(window[3]);
    }
    decode_jpeg_window(bytes, size, top, left, height, width, static_cast<int>(scale_denom),
                       static_cast<int>(channels), max_pixels, *out);
  } catch (const DecodeError& e) {
    FASTLOAD_CHECK(false, op, e.what(), ". Fix or remove the file.");
  } catch (const std::invalid_argument& e) {
    FASTLOAD_CHECK_VALUE(false, op, e.what(), ".");
  }
  return scaled_window_tensor(std::move(out), window.empty(), left, width, static_cast<int>(scale_denom));
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) {
  m.impl("jpeg_header", &jpeg_header_op);
  m.impl("decode_jpeg", &decode_jpeg_op);
}

at::Tensor scaled_window_tensor(std::unique_ptr<DecodedWindow> window, bool whole, int left, int width,
                                int scale_denom) {
  const int d = scale_denom;
  const int s_left = whole ? 0 : left / d;
  const int s_right = whole ? window->scaled_width : (left + width + d - 1) / d;
  const int64_t h = window->height, w = window->width, c = window->channels;
  DecodedWindow* raw = window.release();
  at::Tensor pixels = at::from_blob(
      raw->pixels.data(), {h, w, c}, [raw](void*) { delete raw; }, at::TensorOptions().dtype(at::kByte));
  if (s_left == raw->left && s_right - s_left == w) return pixels;  // no copy
  return pixels.narrow(1, s_left - raw->left, s_right - s_left).contiguous();
}

}  // namespace fastload
