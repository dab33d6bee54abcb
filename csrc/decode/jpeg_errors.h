// libjpeg's error handling for every fastload decoder and transcoder: one manager, one
// rule for warnings. error_exit and the warnings that change pixels longjmp back to the
// caller's setjmp, whose frame holds only POD locals, so no C++ destructor is ever
// skipped. The message is formatted before the jump, while cinfo is intact.
#pragma once

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <jpeglib.h>

namespace fastload {

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg sees JpegErrorManager* as jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
};

// Points cinfo->err at `err` (zeroed first) with fastload's handlers.
void install_jpeg_errors(j_common_ptr cinfo, JpegErrorManager& err);

// Records `message` and longjmps to err->jump.
[[noreturn]] void jpeg_fail(j_common_ptr cinfo, const char* message);

}  // namespace fastload
