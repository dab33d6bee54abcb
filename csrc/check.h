// Error checks for every fastload op.
//
// Messages follow one shape so users can act on them:
//   "fastload.<op>: expected <what>, got <what came>. <how to fix>"
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "host_device.h"

// TORCH_CHECK raises RuntimeError in Python (ValueError for FASTLOAD_CHECK_VALUE)
// and accepts a streamed message built only when the check fails.
#define FASTLOAD_CHECK(cond, op, ...) TORCH_CHECK(cond, "fastload.", op, ": ", __VA_ARGS__)
#define FASTLOAD_CHECK_VALUE(cond, op, ...) \
  TORCH_CHECK_VALUE(cond, "fastload.", op, ": ", __VA_ARGS__)

namespace fastload {

// Checked int64 arithmetic for bounds checks: a shape, stride or offset from the caller
// can be anything up to 2^63, and an overflowing product would "pass" a check and then
// address memory far outside the tensor. Each returns false on overflow (and leaves
// *out unspecified); FASTLOAD_HD so that the CUDA kernels' device checks use them too.
#if defined(__CUDA_ARCH__)
// Device code has no __builtin_*_overflow: the same answers from range tests.
FASTLOAD_HD bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  const bool overflow = a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
                              : (b > 0 ? a < INT64_MIN / b : (a != 0 && b < INT64_MAX / a));
  if (overflow) return false;
  *out = a * b;
  return true;
}
FASTLOAD_HD bool checked_add(int64_t a, int64_t b, int64_t* out) {
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return false;
  *out = a + b;
  return true;
}
#else
FASTLOAD_HD bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
FASTLOAD_HD bool checked_add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }
#endif

// True when the HWC image (offset, height, width, row_stride) with `channels` packed
// channels lies inside a buffer of `numel` bytes, with non-overlapping rows
// (row_stride >= width * channels), every product and sum checked:
//   offset >= 0, height > 0, width > 0, offset + (height - 1) * row_stride + width * channels <= numel.
FASTLOAD_HD bool image_inside(int64_t offset, int64_t height, int64_t width, int64_t row_stride,
                              int64_t channels, int64_t numel) {
  int64_t row_bytes, rows_span, end;
  if (offset < 0 || height <= 0 || width <= 0 || channels <= 0 || numel < 0) return false;
  if (!checked_mul(width, channels, &row_bytes) || row_stride < row_bytes) return false;
  if (!checked_mul(height - 1, row_stride, &rows_span)) return false;
  if (!checked_add(offset, rows_span, &end) || !checked_add(end, row_bytes, &end)) return false;
  return end <= numel;
}

// Raised by the decoders for bad input data (corrupt, truncated, not an image, too
// large). The batch engine catches it per sample and reports it to Python, which applies
// the loader's on_error policy; ops surface it as a RuntimeError with the same message.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fastload
