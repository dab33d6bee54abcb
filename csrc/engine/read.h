// The read stage: where samples' bytes live, and reading them.
//
// Input: the sample index (flat arrays: path bytes + offsets, file ids, byte offsets and
// sizes, views of the SampleIndex's numpy arrays). Output: one sample's encoded bytes in
// a caller-owned, reused buffer. Must not: take the GIL, keep file descriptors open.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fastload::engine {

// Views of the SampleIndex's numpy arrays (kept alive here).
struct Index {
  at::Tensor path_bytes, path_offsets, file_ids, offsets, sizes;

  std::string path(int64_t sample) const;
  int64_t offset(int64_t sample) const { return offsets.data_ptr<int64_t>()[sample]; }
  int64_t size(int64_t sample) const { return sizes.data_ptr<int64_t>()[sample]; }
  int64_t samples() const { return file_ids.numel(); }
};

// Reads `size` bytes at `offset` of `path` into `bytes` (resized; size < 0: the whole
// file). pread, retried on EINTR. Throws std::runtime_error (open, stat or read failed,
// or the file ends early: "expected N bytes at offset O, file ends after K (truncated?)").
void read_file(const std::string& path, int64_t offset, int64_t size, std::vector<uint8_t>& bytes);

}  // namespace fastload::engine
