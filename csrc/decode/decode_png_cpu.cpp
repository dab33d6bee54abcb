// PNG decoding on the CPU with libpng, and the fastload::decode_png op (CPU key). See
// decode_png.h and README.md. Built without libpng (FASTLOAD_PNG_VERSION undefined), the
// header reader still works and every decode throws DecodeError saying how to build it.
#include "decode/decode_png.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef FASTLOAD_PNG_VERSION
#include <png.h>
#endif

#include "check.h"
#include "decode/image_format.h"
#include "engine/gil.h"

namespace fastload {
namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

bool depth_allowed(int color_type, int bit_depth) {
  switch (color_type) {
    case kPngGray:
      return bit_depth == 1 || bit_depth == 2 || bit_depth == 4 || bit_depth == 8 || bit_depth == 16;
    case kPngPalette:
      return bit_depth == 1 || bit_depth == 2 || bit_depth == 4 || bit_depth == 8;
    case kPngRgb:
    case kPngGrayAlpha:
    case kPngRgba:
      return bit_depth == 8 || bit_depth == 16;
    default:
      return false;
  }
}

// PIL's mode for the file, for messages: what np.array(Image.open(f)) would be.
std::string pil_mode(const PngInfo& info) {
  switch (info.color_type) {
    case kPngGray:
      return info.bit_depth == 1 ? "1" : info.bit_depth == 16 ? "I;16" : "L";
    case kPngPalette:
      return "P";
    case kPngRgb:
      return "RGB";
    case kPngGrayAlpha:
      return info.bit_depth == 16 ? "RGBA" : "LA";
    default:
      return "RGBA";
  }
}

std::string describe(const PngInfo& info) {
  static const char* kinds[] = {"gray", "?", "RGB", "palette", "gray+alpha", "?", "RGBA"};
  return std::to_string(info.bit_depth) + "-bit " + kinds[info.color_type] + " PNG (PIL mode " + pil_mode(info) + ")";
}

}  // namespace

PngInfo read_png_info(const uint8_t* data, size_t size) {
  if (size == 0) throw DecodeError("expected a PNG, got 0 bytes (empty file)");
  if (!is_png(data, size)) {
    throw DecodeError("expected a PNG (starting with 89 50 4E 47 0D 0A 1A 0A), got " + describe_prefix(data, size));
  }
  // Signature (8), then the IHDR chunk: length (4), type (4), 13 bytes of fields, CRC (4).
  constexpr size_t kIhdrEnd = 8 + 8 + 13;
  if (size < kIhdrEnd) {
    throw DecodeError("expected a PNG header (IHDR) in the first " + std::to_string(kIhdrEnd) + " bytes, got only " +
                      std::to_string(size) + " bytes (truncated file)");
  }
  const uint8_t* ihdr = data + 8;
  if (be32(ihdr) != 13 || std::memcmp(ihdr + 4, "IHDR", 4) != 0) {
    throw DecodeError("expected the IHDR chunk (13 bytes) right after the PNG signature, got a chunk of " +
                      std::to_string(be32(ihdr)) + " bytes typed " + describe_prefix(ihdr + 4, 4));
  }
  const uint32_t width = be32(ihdr + 8), height = be32(ihdr + 12);
  const uint8_t* fields = ihdr + 16;
  PngInfo info;
  info.bit_depth = fields[0];
  info.color_type = fields[1];
  info.interlaced = fields[4] == 1;
  // PNG's limit is 2^31 - 1 in each dimension.
  if (width == 0 || height == 0 || width > 0x7FFFFFFFu || height > 0x7FFFFFFFu) {
    throw DecodeError("expected a PNG size of 1 to 2^31 - 1 pixels a side, got " + std::to_string(height) + "x" +
                      std::to_string(width) + " in the IHDR (corrupt header)");
  }
  info.height = static_cast<int>(height);
  info.width = static_cast<int>(width);
  if (!depth_allowed(info.color_type, info.bit_depth)) {
    throw DecodeError("expected a PNG colour type (0, 2, 3, 4, 6) with a bit depth it allows, got colour type " +
                      std::to_string(info.color_type) + " at " + std::to_string(info.bit_depth) +
                      " bits (corrupt header)");
  }
  if (fields[2] != 0 || fields[3] != 0 || fields[4] > 1) {
    throw DecodeError("expected PNG compression method 0, filter method 0 and interlace 0 or 1, got " +
                      std::to_string(fields[2]) + ", " + std::to_string(fields[3]) + " and " +
                      std::to_string(fields[4]) + " (corrupt header)");
  }
  return info;
}

std::string png_limit_error(const PngInfo& info, int64_t max_pixels) {
  const int64_t pixels = static_cast<int64_t>(info.height) * info.width;
  if (max_pixels <= 0 || pixels <= max_pixels) return "";
  return "expected at most " + std::to_string(max_pixels) + " pixels, got a " + std::to_string(info.height) + "x" +
         std::to_string(info.width) + " image (" + std::to_string(pixels) +
         " pixels; a decompression bomb?). If the file is trusted, raise max_pixels (<= 0 disables the limit)";
}

#ifdef FASTLOAD_PNG_VERSION

bool png_decoder_built() { return true; }

namespace {

// The state libpng's callbacks see: plain data, so that a longjmp over it skips nothing.
struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

extern "C" void fastload_png_read(png_structp png, png_bytep out, size_t count) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (count > src->size - src->pos) png_error(png, "unexpected end of file (truncated?)");
  std::memcpy(out, src->data + src->pos, count);
  src->pos += count;
}

extern "C" void fastload_png_error(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof(src->message), "%s", message);
  png_longjmp(png, 1);
}

// Warnings (and the benign errors libpng demotes to warnings when reading) leave the
// pixels as the file holds them: extra compressed data after the last row, a bad
// ancillary chunk that is skipped anyway. PIL loads such files too.
extern "C" void fastload_png_warning(png_structp, png_const_charp) {}

// Ancillary chunks neither convert("RGB") nor np.array() read: skipped unparsed (so a
// compressed text or ICC chunk is never inflated), their CRCs still checked. tRNS too:
// PIL keeps transparency in `info` and convert("RGB") drops it.
constexpr png_byte kSkippedChunks[] =
    "bKGD\0cHRM\0cICP\0eXIf\0gAMA\0hIST\0iCCP\0iTXt\0mDCv\0cLLi\0oFFs\0pCAL\0pHYs\0sBIT\0sCAL\0sPLT\0sRGB\0"
    "sTER\0tEXt\0tIME\0tRNS\0zTXt";
constexpr int kSkippedChunkCount = static_cast<int>(sizeof(kSkippedChunks) / 5);

// Owns one libpng read struct and its info struct: destroyed on every path.
class PngReader {
 public:
  PngReader(const uint8_t* data, size_t size) : source_{data, size, 0, {0}} {
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source_, fastload_png_error, fastload_png_warning);
    if (png_ == nullptr) throw std::bad_alloc();
    info_ = png_create_info_struct(png_);
    if (info_ == nullptr) {
      png_destroy_read_struct(&png_, nullptr, nullptr);
      throw std::bad_alloc();
    }
    png_set_read_fn(png_, &source_, fastload_png_read);
  }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;
  ~PngReader() { png_destroy_read_struct(&png_, &info_, nullptr); }

  png_structp png_;
  png_infop info_;
  PngSource source_;
};

// Per-row conversion from libpng's rows (after png_set_packing: one byte per sample below
// 8 bits, two big-endian bytes at 16) to the output. POD: it lives in setjmp frames.
struct RowConverter {
  PngMode mode;
  int color_type;
  int bit_depth;
  int width;
  uint8_t gray_scale;          // sub-8-bit gray to 0..255 (PIL's "L;2", "L;4"; "1" as an image)
  uint8_t palette_rgb[256 * 3];  // entries past the palette's end: black, as Pillow's
  uint8_t palette_luma[256];
};

// Pillow's luma (Convert.c, L24): ITU-R 601-2 in 16-bit fixed point, rounded.
inline uint8_t luma(uint32_t r, uint32_t g, uint32_t b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

// True when libpng's rows already are the output's (8-bit RGB as RGB; 8-bit gray, or
// palette indices, as one channel; 1-bit gray as a mask): rows are read straight into
// the output, with no conversion.
bool rows_are_output(const RowConverter& c) {
  if (c.bit_depth == 16) return false;
  switch (c.color_type) {
    case kPngRgb:
      return c.mode == PngMode::kRgb;
    case kPngGray:
      return c.mode != PngMode::kRgb && c.gray_scale == 1;
    case kPngPalette:
      return c.mode == PngMode::kMask;
    default:
      return false;
  }
}

void convert_row(const RowConverter& c, const uint8_t* in, uint8_t* out) noexcept {
  const int w = c.width;
  const bool rgb = c.mode == PngMode::kRgb;
  if (rows_are_output(c)) {
    std::memcpy(out, in, static_cast<size_t>(w) * (rgb ? 3 : 1));
    return;
  }
  switch (c.color_type) {
    case kPngPalette:
      if (c.mode == PngMode::kMask) {
        std::memcpy(out, in, static_cast<size_t>(w));
      } else if (rgb) {
        for (int x = 0; x < w; ++x) std::memcpy(out + 3 * x, c.palette_rgb + 3 * in[x], 3);
      } else {
        for (int x = 0; x < w; ++x) out[x] = c.palette_luma[in[x]];
      }
      return;
    case kPngGray: {
      const bool wide = c.bit_depth == 16;
      for (int x = 0; x < w; ++x) {
        // PIL's "I;16" converts by clipping, not scaling.
        const uint8_t v = wide ? static_cast<uint8_t>(std::min<uint32_t>((uint32_t{in[2 * x]} << 8) | in[2 * x + 1], 255))
                               : static_cast<uint8_t>(in[x] * c.gray_scale);
        if (rgb) {
          out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = v;
        } else {
          out[x] = v;
        }
      }
      return;
    }
    default: {  // gray+alpha, RGB, RGBA: 8 bits, or the high byte of 16 (PIL's ";16B" raw modes)
      const int samples = c.color_type == kPngGrayAlpha ? 2 : c.color_type == kPngRgb ? 3 : 4;
      const int step = samples * (c.bit_depth / 8), byte = c.bit_depth / 8;
      for (int x = 0; x < w; ++x) {
        const uint8_t* p = in + static_cast<size_t>(x) * step;
        if (c.color_type == kPngGrayAlpha) {
          if (rgb) {
            out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = p[0];
          } else {
            out[x] = p[0];
          }
        } else if (rgb) {
          out[3 * x] = p[0];
          out[3 * x + 1] = p[byte];
          out[3 * x + 2] = p[2 * byte];
        } else {
          out[x] = luma(p[0], p[byte], p[2 * byte]);
        }
      }
      return;
    }
  }
}

// Reads the chunks up to the image data and sets libpng's transforms. Returns false on a
// libpng error (message in the source). Only POD locals: libpng longjmps here.
bool start_read(PngReader* r, size_t* rowbytes, int* palette_entries, uint8_t* palette_rgb) {
  png_structp png = r->png_;
  png_infop info = r->info_;
  if (setjmp(png_jmpbuf(png))) return false;
#ifdef PNG_HANDLE_AS_UNKNOWN_SUPPORTED
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, 0);  // unknown ancillary chunks
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kSkippedChunks, kSkippedChunkCount);
#endif
  // A bad CRC is an error in every chunk read (libpng only warns for ancillary ones).
  png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
#ifdef PNG_CHECK_FOR_INVALID_INDEX_SUPPORTED
  png_set_check_for_invalid_index(png, 0);  // indices past the palette: Pillow's black, below
#endif
  png_read_info(png, info);
  png_colorp palette = nullptr;
  int entries = 0;
  if (png_get_color_type(png, info) == PNG_COLOR_TYPE_PALETTE && png_get_PLTE(png, info, &palette, &entries) != 0) {
    entries = std::clamp(entries, 0, 256);
    for (int i = 0; i < entries; ++i) {
      palette_rgb[3 * i] = palette[i].red;
      palette_rgb[3 * i + 1] = palette[i].green;
      palette_rgb[3 * i + 2] = palette[i].blue;
    }
  }
  *palette_entries = entries;
  if (png_get_bit_depth(png, info) < 8) png_set_packing(png);  // one sample per byte, values kept
  if (png_get_interlace_type(png, info) != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *rowbytes = png_get_rowbytes(png, info);
  return true;
}

// Rows [top, bottom) converted into `out` (row stride out_row): a non-interlaced file is
// read row by row down to `bottom` (rows above the band are read into `scratch` and
// dropped); an interlaced one whole into `rows` (the image's row pointers). Only POD
// locals: libpng longjmps here.
bool read_band(PngReader* r, const RowConverter* c, int top, int bottom, bool interlaced, png_bytep scratch,
               png_bytepp rows, uint8_t* out, size_t out_row) {
  png_structp png = r->png_;
  if (setjmp(png_jmpbuf(png))) return false;
  if (interlaced) {
    png_read_image(png, rows);
    for (int y = top; y < bottom; ++y) convert_row(*c, rows[y], out + static_cast<size_t>(y - top) * out_row);
    return true;
  }
  const bool direct = rows_are_output(*c);
  for (int y = 0; y < bottom; ++y) {
    uint8_t* band_row = y >= top ? out + static_cast<size_t>(y - top) * out_row : nullptr;
    png_read_row(png, direct && band_row != nullptr ? band_row : scratch, nullptr);
    if (!direct && band_row != nullptr) convert_row(*c, scratch, band_row);
  }
  return true;
}

std::string libpng_error(const PngReader& r) {
  return std::string("expected a decodable PNG, got corrupt, truncated or unsupported data (libpng: ") +
         r.source_.message + ")";
}

}  // namespace

void decode_png_rows(const uint8_t* data, size_t size, int top, int height, PngMode mode, int64_t max_pixels,
                     DecodedWindow& out) {
  const PngInfo info = read_png_info(data, size);
  if (top < 0 || top >= info.height || (height > 0 && height > info.height - top)) {
    throw std::invalid_argument("expected rows [top, top + height) inside the " + std::to_string(info.height) +
                                " rows of the image, got top " + std::to_string(top) + ", height " +
                                std::to_string(height));
  }
  const int bottom = height > 0 ? top + height : info.height;
  if (mode == PngMode::kMask && !((info.color_type == kPngGray && info.bit_depth <= 8) ||
                                  info.color_type == kPngPalette)) {
    throw DecodeError("expected a label-map PNG for a mask (8-bit or less gray, or palette: PIL modes 1, L, P), "
                      "got a " + describe(info) + ". Save masks as mode L or P (uint8 class indices)");
  }
  const std::string limit = png_limit_error(info, max_pixels);
  if (!limit.empty()) throw DecodeError(limit);

  PngReader reader(data, size);
  auto converter = std::make_unique<RowConverter>();
  converter->mode = mode;
  converter->color_type = info.color_type;
  converter->bit_depth = info.bit_depth;
  converter->width = info.width;
  // As images, 1/2/4-bit gray spans 0..255 (PIL's "1" converts to 0 / 255); as masks,
  // 1-bit gray stays 0 / 1 (np.array of mode "1" is boolean).
  const bool mask_bits = mode == PngMode::kMask && info.bit_depth == 1;
  converter->gray_scale = static_cast<uint8_t>(
      info.bit_depth >= 8 || mask_bits ? 1 : 255 / ((1 << info.bit_depth) - 1));
  std::memset(converter->palette_rgb, 0, sizeof(converter->palette_rgb));
  size_t rowbytes = 0;
  int entries = 0;
  if (!start_read(&reader, &rowbytes, &entries, converter->palette_rgb)) throw DecodeError(libpng_error(reader));
  if (info.color_type == kPngPalette && entries == 0) {
    throw DecodeError("expected a PLTE chunk before the image data of a palette PNG, got none (corrupt file)");
  }
  for (int i = 0; i < 256; ++i) {
    const uint8_t* p = converter->palette_rgb + 3 * i;
    converter->palette_luma[i] = luma(p[0], p[1], p[2]);
  }

  const int channels = mode == PngMode::kRgb ? 3 : 1;
  const size_t out_row = static_cast<size_t>(info.width) * channels;
  // Not zeroed: libpng writes every byte before it is read, and a file that announces a
  // large image and then ends costs no more than its header.
  std::unique_ptr<png_byte[]> scratch;
  std::vector<png_bytep> rows;
  int64_t scratch_bytes = static_cast<int64_t>(rowbytes);
  if (info.interlaced && !checked_mul(scratch_bytes, info.height, &scratch_bytes)) scratch_bytes = -1;
  if (scratch_bytes >= 0) scratch.reset(new (std::nothrow) png_byte[static_cast<size_t>(scratch_bytes)]);
  if (scratch == nullptr) {
    throw DecodeError("expected a PNG that fits in memory, got a " + std::to_string(info.height) + "x" +
                      std::to_string(info.width) + " " + describe(info) + (info.interlaced ? " (interlaced)" : "") +
                      ". Lower max_pixels to refuse such files, or resize the image");
  }
  if (info.interlaced) {  // Adam7 fills every row in each of 7 passes: the whole image
    rows.resize(static_cast<size_t>(info.height));
    for (int y = 0; y < info.height; ++y) rows[y] = scratch.get() + static_cast<size_t>(y) * rowbytes;
  }
  out.pixels.resize(out_row * static_cast<size_t>(bottom - top));
  if (!read_band(&reader, converter.get(), top, bottom, info.interlaced, scratch.get(), rows.data(),
                 out.pixels.data(), out_row)) {
    throw DecodeError(libpng_error(reader));
  }
  out.height = bottom - top;
  out.width = info.width;
  out.channels = channels;
  out.scale_denom = 1;
  out.scaled_height = info.height;
  out.scaled_width = info.width;
  out.top = top;
  out.left = 0;
}

#else  // built without libpng

bool png_decoder_built() { return false; }

void decode_png_rows(const uint8_t* data, size_t size, int, int, PngMode, int64_t, DecodedWindow&) {
  read_png_info(data, size);  // the same errors for what is not a PNG
  throw DecodeError(
      "fastload._C was built without libpng, so PNG is decoded by PIL only. Install libpng (apt-get install "
      "libpng-dev) or set FASTLOAD_PNG_PREFIX, and rebuild");
}

#endif

// ---- op -------------------------------------------------------------------------------
namespace {

PngMode parse_mode(c10::string_view mode, const char* op) {
  if (mode == "RGB") return PngMode::kRgb;
  if (mode == "L") return PngMode::kGray;
  if (mode == "mask") return PngMode::kMask;
  FASTLOAD_CHECK_VALUE(false, op, "expected mode \"RGB\", \"L\" or \"mask\", got \"", std::string(mode), "\".");
  return PngMode::kRgb;
}

at::Tensor decode_png_op(const at::Tensor& data, c10::IntArrayRef window, c10::string_view mode_name,
                         int64_t max_pixels) {
  constexpr const char* op = "decode_png";
  FASTLOAD_CHECK(data.device().is_cpu(), op, "expected the PNG bytes on the CPU, got a tensor on ", data.device(),
                 ". Pass the file's bytes as a CPU tensor.");
  FASTLOAD_CHECK(data.scalar_type() == at::kByte, op, "expected uint8 bytes, got dtype ", data.scalar_type(),
                 ". Use torch.frombuffer(bytearray(b), dtype=torch.uint8).");
  FASTLOAD_CHECK(data.dim() == 1 && data.is_contiguous(), op, "expected a contiguous 1-D tensor of bytes, got shape ",
                 data.sizes(), " and strides ", data.strides(), ". Use .flatten().contiguous().");
  FASTLOAD_CHECK_VALUE(window.empty() || window.size() == 4, op,
                       "expected window [] or [top, left, height, width], got ", window.size(), " values.");
  const PngMode mode = parse_mode(mode_name, op);
  const auto* bytes = data.data_ptr<uint8_t>();
  const auto size = static_cast<size_t>(data.numel());
  auto out = std::make_unique<DecodedWindow>();
  std::string decode_error;
  int left = 0, width = 0;
  try {
    if (!window.empty()) {
      const PngInfo info = read_png_info(bytes, size);
      FASTLOAD_CHECK_VALUE(window[0] >= 0 && window[1] >= 0 && window[2] > 0 && window[3] > 0 &&
                               window[0] + window[2] <= info.height && window[1] + window[3] <= info.width,
                           op, "expected a window [top, left, height, width] inside the ", info.height, "x",
                           info.width, " image with height, width > 0, got ", window, ". Clamp it to the image size.");
      left = static_cast<int>(window[1]);
      width = static_cast<int>(window[3]);
    }
    // The decode needs no Python: other Python threads run meanwhile (a loader's
    // threads, a training step). Only when called from Python, which holds the GIL.
    std::optional<engine::GilRelease> unlocked;
    if (Py_IsInitialized() && PyGILState_Check()) unlocked.emplace();
    decode_png_rows(bytes, size, window.empty() ? 0 : static_cast<int>(window[0]),
                    window.empty() ? 0 : static_cast<int>(window[2]), mode, max_pixels, *out);
  } catch (const DecodeError& e) {
    decode_error = e.what();
  }
  FASTLOAD_CHECK(decode_error.empty(), op, decode_error, ". Fix or remove the file.");
  const int64_t h = out->height, w = out->width, c = out->channels;
  DecodedWindow* raw = out.release();
  at::Tensor pixels = at::from_blob(
      raw->pixels.data(), {h, w, c}, [raw](void*) { delete raw; }, at::TensorOptions().dtype(at::kByte));
  if (!window.empty() && width != w) pixels = pixels.narrow(1, left, width).contiguous();
  return mode == PngMode::kMask ? pixels.squeeze(2) : pixels;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) { m.impl("decode_png", &decode_png_op); }

}  // namespace fastload
