// One sample's pipeline: read -> header -> region -> window -> decode -> augment into
// its slot of the batch (or, in cpu+gpu mode, keep the crop window for the device).
//
// Input: a Job (the batch: index, plan, sample indices, output or crop-window storage)
// and a slot. Output: the slot written (or its crop window kept), and its status and
// message. Must not: take the GIL or call Python; throw (every error is a status);
// allocate per pixel (buffers live in the worker's SampleState).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ThreadLocalState.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "augment/crop_resize_flip_normalize_cpu.h"
#include "augment/plan.h"
#include "augment/views.h"
#include "decode/decode_jpeg.h"
#include "engine/mask_decode.h"
#include "engine/read.h"

namespace fastload::engine {

// Per-sample outcome, bound as fastload._C.Status. kBadGeometry: the plan gives this
// image no pixels to sample (e.g. a resize to 0 rows, an empty crop), which torchvision
// refuses too; like a decode error it goes through the loader's on_error policy.
enum class Status : int32_t { kOk = 0, kDecodeError = 1, kNotJpeg = 2, kReadError = 3, kBadGeometry = 4 };

// The outputs of a sample beyond the plan's one image (augment/views.h): image views
// 1..K-1 with their own plans (seeded view_seed(seed, v); the decode's settings are view
// 0's), and masks read from a second file of the sample that follow a view's geometry.
struct ViewSet {
  std::vector<Plan> plans;
  std::vector<MaskSpec> masks;
};

// One submitted batch.
struct Job {
  std::shared_ptr<const Index> index;
  std::shared_ptr<const Plan> plan;
  std::shared_ptr<const ViewSet> views;   // null: one output per sample
  std::shared_ptr<const Index> mask_index;  // the masks' files, same sample numbers
  std::vector<at::Tensor> view_out;  // image views 1..K-1: [B, C, H, W] each
  std::vector<at::Tensor> mask_out;  // masks: uint8 or int64, [B, H, W] or [B, 1, H, W]
  std::vector<int64_t> samples;
  std::unordered_map<int64_t, at::Tensor> predecoded;  // slot -> uint8 HWC (PIL fallback)
  at::Tensor out;  // [B, C, H, W]; undefined in cpu+gpu mode
  // cpu+gpu mode: each sample's crop window (the sampling view of its decoded pixels),
  // its box and flip; the device's kernel resizes and normalises them.
  std::vector<std::vector<uint8_t>> windows;
  std::vector<std::array<int64_t, 2>> window_sizes;  // (height, width)
  std::vector<Box> boxes;
  std::vector<uint8_t> flips;  // 1: left-right, 2: top-bottom
  bool pin_memory = false;
  int64_t epoch = 0;
  // The submitting thread's state when a profiler records there (its callbacks live in
  // thread-local state): engine threads adopt it per sample, so their stage ranges land
  // in that trace. Empty otherwise, at no cost.
  std::optional<at::ThreadLocalState> profiling;
  std::vector<int32_t> status;  // Status values
  std::vector<std::string> message;
  int64_t remaining = 0;  // guarded by mutex
  std::mutex mutex;
  std::condition_variable done;
};

// Where a sample's CPU time goes, per engine thread. kAugment is the fused pass (cpu
// mode) or the copy of the crop window (cpu+gpu mode); kHeader covers the JPEG header
// and the sample's geometry (region_of).
enum Stage : int { kRead = 0, kHeader = 1, kDecode = 2, kAugment = 3, kStageCount = 4 };
inline constexpr const char* kStageNames[kStageCount] = {"read", "header", "decode", "augment"};

// One engine thread's totals since the engine started: nanoseconds per stage and samples
// run. Written by that thread only, read by Python at any time (relaxed atomics: a
// reading is at most one sample old).
struct ThreadTimes {
  std::array<std::atomic<int64_t>, kStageCount> stage_ns{};
  std::atomic<int64_t> samples{0};
  // The thread's own CPU clock, read by others while it runs (a clock read per stage
  // would be a system call per mark: ~6 us here, against 0.25 us for steady_clock).
  std::atomic<clockid_t> cpu_clock{0};
  std::atomic<bool> running{false};
  std::atomic<int64_t> cpu_ns_at_exit{0};  // written before running turns false
};

// CPU nanoseconds `times`' thread has used so far (its final figure once it exited).
int64_t thread_cpu_ns(const ThreadTimes& times);

// Buffers each worker thread reuses across samples, and where it counts its time.
struct SampleState {
  std::vector<uint8_t> bytes;
  DecodedWindow window;
  std::vector<int64_t> segments;  // a prepared file's embedded segment index (decode/transcode.h)
  ResizeScratch scratch;
  std::vector<Region> regions;  // one per image view of the sample being run
  std::vector<uint8_t> mask_bytes;
  MaskImage mask;
  std::vector<int32_t> mask_rows, mask_cols;
  ThreadTimes* times = nullptr;  // the engine's counters of this thread (none: not counted)
};

// Runs one sample of the job and records its status and message. Never throws.
void run_sample(Job& job, int64_t slot, SampleState& state) noexcept;

// The crop windows of a cpu+gpu-mode job, packed into one uint8 buffer (one copy, pinned
// if the job asks): the inputs of crop_resize_flip_normalize_batch. A failed sample
// gets one black pixel, which keeps the kernel's inputs valid.
struct PackedWindows {
  at::Tensor packed;  // uint8 1-D
  at::Tensor shapes;  // int64 [B, 4]: (offset, height, width, row_stride)
  at::Tensor boxes;   // float32 [B, 4]
  at::Tensor flips;   // bool [B], or [B, 2] (left-right, top-bottom) when the plan flips top-bottom
};
PackedWindows pack_windows(Job& job);

}  // namespace fastload::engine
