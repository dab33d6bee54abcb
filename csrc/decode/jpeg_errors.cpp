// libjpeg's error manager for fastload (see jpeg_errors.h).
#include "decode/jpeg_errors.h"

#include <cstring>
#include <jerror.h>  // JWRN_* warning codes

namespace fastload {

[[noreturn]] void jpeg_fail(j_common_ptr cinfo, const char* message) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  std::snprintf(err->message, sizeof(err->message), "%s", message);
  std::longjmp(err->jump, 1);
}

namespace {

extern "C" void fastload_jpeg_error_exit(j_common_ptr cinfo) {
  char buffer[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, buffer);
  jpeg_fail(cinfo, buffer);
}

// msg_level -1 is a warning: corrupt entropy data, premature end of file (libjpeg then
// pads with grey), bogus progression... Those mean the pixels are not what the file was
// meant to hold, so they are errors here: a training sample must never silently be half
// grey. A few warnings leave the pixels intact (junk bytes between markers, an unknown
// JFIF revision or Adobe transform code, a bad ICC marker); Pillow, hence torchvision,
// loads such files, and so do we. Levels >= 0 are trace messages: ignored.
extern "C" void fastload_jpeg_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;
  switch (cinfo->err->msg_code) {
    case JWRN_EXTRANEOUS_DATA:
    case JWRN_JFIF_MAJOR:
    case JWRN_ADOBE_XFORM:
    case JWRN_BOGUS_ICC:
      cinfo->err->num_warnings++;
      return;
    default:
      fastload_jpeg_error_exit(cinfo);
  }
}

}  // namespace

void install_jpeg_errors(j_common_ptr cinfo, JpegErrorManager& err) {
  std::memset(&err, 0, sizeof(err));
  cinfo->err = jpeg_std_error(&err.pub);
  err.pub.error_exit = fastload_jpeg_error_exit;
  err.pub.emit_message = fastload_jpeg_emit_message;
}

}  // namespace fastload
