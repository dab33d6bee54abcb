// The read stage: pread of whole files or of tar members by (offset, size).
#include "engine/read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace fastload::engine {

std::string Index::path(int64_t sample) const {
  const int64_t file = file_ids.data_ptr<int64_t>()[sample];
  const int64_t* bounds = path_offsets.data_ptr<int64_t>() + file;
  const char* base = reinterpret_cast<const char*>(path_bytes.data_ptr<uint8_t>());
  return std::string(base + bounds[0], base + bounds[1]);
}

void read_file(const std::string& path, int64_t offset, int64_t size, std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open: " + std::string(std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (size < 0) {
    struct stat info;
    if (::fstat(fd, &info) != 0) throw std::runtime_error("cannot stat: " + std::string(std::strerror(errno)));
    size = info.st_size;
    offset = 0;
  }
  bytes.resize(static_cast<size_t>(size));
  int64_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, bytes.data() + done, static_cast<size_t>(size - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw std::runtime_error("read failed: " + std::string(std::strerror(errno)));
    if (got == 0) {
      throw std::runtime_error("expected " + std::to_string(size) + " bytes at offset " +
                               std::to_string(offset) + ", file ends after " + std::to_string(done) +
                               " (truncated?)");
    }
    done += got;
  }
}

}  // namespace fastload::engine
