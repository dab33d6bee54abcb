// Error checks for every fastload op.
//
// Messages follow one shape so users can act on them:
//   "fastload.<op>: expected <what>, got <what came>. <how to fix>"
#pragma once

#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>

// TORCH_CHECK raises RuntimeError in Python (ValueError for FASTLOAD_CHECK_VALUE)
// and accepts a streamed message built only when the check fails.
#define FASTLOAD_CHECK(cond, op, ...) TORCH_CHECK(cond, "fastload.", op, ": ", __VA_ARGS__)
#define FASTLOAD_CHECK_VALUE(cond, op, ...) \
  TORCH_CHECK_VALUE(cond, "fastload.", op, ": ", __VA_ARGS__)

namespace fastload {

// Raised by the decoders for bad input data (corrupt, truncated, not an image, too
// large). The batch engine catches it per sample and reports it to Python, which applies
// the loader's on_error policy; ops surface it as a RuntimeError with the same message.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fastload
