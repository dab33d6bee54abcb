// The batch engine. See batch.h.
#include "engine/batch.h"

#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>

namespace fastload::engine {

pybind11::dict build_info() {
  pybind11::dict info;
  info["libjpeg_turbo"] = FASTLOAD_JPEG_VERSION;
  info["libjpeg_api"] = JPEG_LIB_VERSION;
#ifdef FASTLOAD_WITH_CUDA
  info["cuda"] = true;
#else
  info["cuda"] = false;
#endif
#ifdef FASTLOAD_WITH_NVJPEG
  info["nvjpeg"] = true;
#else
  info["nvjpeg"] = false;
#endif
  info["flags"] = FASTLOAD_BUILD_FLAGS;
#if defined(__clang__)
  info["compiler"] = "clang " __clang_version__;
#elif defined(__GNUC__)
  info["compiler"] = "gcc " __VERSION__;
#endif
  return info;
}

void bind(pybind11::module_& module) { (void)module; }

}  // namespace fastload::engine
