// The format dispatch of mask files (see mask_decode.h).
#include "engine/mask_decode.h"

#include <cstring>
#include <string>

#include "check.h"
#include "decode/decode_png.h"
#include "decode/image_format.h"

namespace fastload::engine {
namespace {

constexpr uint8_t kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

// A header field as a message shows it: at most 60 characters (a damaged header's
// field may run on).
std::string shown(const std::string& text) { return text.size() <= 60 ? text : text.substr(0, 60) + "..."; }

// The value of `key` in a .npy header dict ("'descr': '|u1', 'fortran_order': False,
// 'shape': (4, 5), }"): the text after "'key':" up to the next ',' outside parentheses.
std::string npy_field(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return "";
  size_t begin = header.find(':', at);
  if (begin == std::string::npos) return "";
  ++begin;
  int depth = 0;
  size_t end = begin;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if ((c == ',' && depth == 0) || c == '}') break;
  }
  std::string value = header.substr(begin, end - begin);
  const size_t first = value.find_first_not_of(" \t");
  const size_t last = value.find_last_not_of(" \t");
  return first == std::string::npos ? "" : value.substr(first, last - first + 1);
}

// The integers of a shape tuple "(4, 5)" / "(4, 5, 1)"; false on anything else.
bool npy_shape(const std::string& text, std::vector<int64_t>& dims) {
  dims.clear();
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') return false;
  size_t i = 1;
  while (i < text.size() - 1) {
    while (i < text.size() - 1 && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i >= text.size() - 1) break;
    int64_t value = 0;
    size_t digits = 0;
    while (i < text.size() - 1 && text[i] >= '0' && text[i] <= '9' && digits < 12) {
      value = value * 10 + (text[i] - '0');
      ++i;
      ++digits;
    }
    if (digits == 0 || (i < text.size() - 1 && text[i] != ',' && text[i] != ' ')) return false;
    dims.push_back(value);
  }
  return true;
}

// numpy's .npy format, versions 1 to 3: magic, version, header length, a Python dict
// literal, then the C-order data.
void decode_npy(const uint8_t* data, size_t size, int64_t max_pixels, MaskImage& out) {
  const auto fail = [](const std::string& what) {
    throw DecodeError("fastload.decode_mask: expected a .npy mask of uint8 [H, W] or [H, W, 1] in C order, got " +
                      what + ". Save masks with np.save(path, mask.astype(np.uint8))");
  };
  if (size < 10) fail("a file of " + std::to_string(size) + " bytes");
  const int major = data[6];
  size_t header_length = 0, start = 0;
  if (major == 1) {
    header_length = data[8] | (static_cast<size_t>(data[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) fail("a truncated header");
    header_length = data[8] | (static_cast<size_t>(data[9]) << 8) | (static_cast<size_t>(data[10]) << 16) |
                    (static_cast<size_t>(data[11]) << 24);
    start = 12;
  } else {
    fail("format version " + std::to_string(major));
  }
  if (header_length > size - start) fail("a header longer than the file");
  // Non-printable bytes become '?': they can be no part of a valid header, and fields
  // of it go into messages.
  std::string header(reinterpret_cast<const char*>(data + start), header_length);
  for (char& c : header) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  const std::string descr = npy_field(header, "descr");
  if (descr != "'|u1'" && descr != "'<u1'" && descr != "'>u1'" && descr != "'u1'") fail("dtype " + shown(descr));
  if (npy_field(header, "fortran_order") != "False") fail("fortran_order " + shown(npy_field(header, "fortran_order")));
  std::vector<int64_t> dims;
  if (!npy_shape(npy_field(header, "shape"), dims) || dims.size() < 2 || dims.size() > 3 ||
      (dims.size() == 3 && dims[2] != 1)) {
    fail("shape " + shown(npy_field(header, "shape")));
  }
  const int64_t height = dims[0], width = dims[1];
  if (height <= 0 || width <= 0 || height > INT32_MAX || width > INT32_MAX) fail("shape " + shown(npy_field(header, "shape")));
  int64_t pixels = 0;
  if (!checked_mul(height, width, &pixels) || (max_pixels > 0 && pixels > max_pixels)) {
    throw DecodeError("fastload.decode_mask: expected at most " + std::to_string(max_pixels) + " pixels, got a " +
                      std::to_string(height) + "x" + std::to_string(width) +
                      " mask (a decompression bomb?). Raise max_pixels to allow it");
  }
  const size_t body = start + header_length;
  if (static_cast<uint64_t>(pixels) > size - body) {
    fail(std::to_string(size - body) + " bytes of data for a " + std::to_string(height) + "x" + std::to_string(width) +
         " array (truncated?)");
  }
  out.height = static_cast<int>(height);
  out.width = static_cast<int>(width);
  out.pixels.assign(data + body, data + body + pixels);
}

// A one-channel decoded image (its rows `width` bytes apart) as the mask's pixels.
void copy_rows(const DecodedWindow& decoded, MaskImage& out) {
  out.height = decoded.height;
  out.width = decoded.width;
  out.pixels.resize(static_cast<size_t>(decoded.height) * decoded.width);
  for (int y = 0; y < decoded.height; ++y) {
    std::memcpy(out.pixels.data() + static_cast<size_t>(y) * decoded.width,
                decoded.pixels.data() + static_cast<size_t>(y) * decoded.width * decoded.channels, decoded.width);
  }
}

}  // namespace

MaskFormat mask_format(const uint8_t* data, size_t size) {
  if (is_jpeg(data, size)) return MaskFormat::kJpeg;
  if (size >= sizeof(kNpyMagic) && std::memcmp(data, kNpyMagic, sizeof(kNpyMagic)) == 0) return MaskFormat::kNpy;
  if (is_png(data, size)) return MaskFormat::kPng;
  return MaskFormat::kUnknown;
}

void decode_mask(const uint8_t* data, size_t size, int64_t max_pixels, MaskImage& out, DecodedWindow& scratch) {
  switch (mask_format(data, size)) {
    case MaskFormat::kJpeg:
      // The whole image at full scale, one channel (a grayscale JPEG's luma).
      decode_jpeg_window(data, size, 0, 0, 0, 0, 1, 1, max_pixels, scratch);
      copy_rows(scratch, out);
      return;
    case MaskFormat::kNpy:
      decode_npy(data, size, max_pixels, out);
      return;
    case MaskFormat::kPng:
      // np.array(Image.open(path)) of an 8-bit L or P label map (palette indexes, not
      // colours); another PNG is refused by the decoder, naming what it is.
      decode_png_rows(data, size, 0, 0, PngMode::kMask, max_pixels, scratch);
      copy_rows(scratch, out);
      return;
    case MaskFormat::kUnknown:
      break;
  }
  throw DecodeError("fastload.decode_mask: expected a mask file (PNG of mode L or P, .npy uint8 [H, W], grayscale "
                    "JPEG), got " + describe_prefix(data, size));
}

}  // namespace fastload::engine
