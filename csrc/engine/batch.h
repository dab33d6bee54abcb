// The batch engine: a C++ thread pool that runs whole batches of samples (sample.h)
// with the GIL released. Bound as fastload._C.BatchEngine in fastload.cpp; see
// engine/README.md.
#pragma once

#include <ATen/core/Tensor.h>
#include <sys/types.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/sample.h"

namespace fastload::engine {

// What wait() hands back: per-sample status (int32 [B], Status values) and messages;
// in cpu+gpu mode also the packed crop windows.
struct BatchResult {
  at::Tensor status;
  std::vector<std::string> messages;
  std::optional<PackedWindows> windows;
};

class BatchEngine {
 public:
  explicit BatchEngine(int num_threads);
  ~BatchEngine();
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()); }

  // Each thread's time per stage since the engine started: (seconds float64
  // [threads, kStageCount] in kStageNames order, samples int64 [threads], CPU seconds
  // float64 [threads] from the thread's own clock). Cheap: reads counters, never waits.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> thread_times() const;

  // Stage timing on (the default) or off: off, the threads read no clock per sample (for
  // measuring what timing costs). CPU seconds are kept either way.
  void set_timing(bool on) { queue_->timing.store(on, std::memory_order_relaxed); }
  bool timing() const { return queue_->timing.load(std::memory_order_relaxed); }

  void set_index(at::Tensor path_bytes, at::Tensor path_offsets, at::Tensor file_ids, at::Tensor offsets,
                 at::Tensor sizes);
  // Validates the plan (ValueError "fastload.BatchEngine.set_plan: expected ...") and
  // keeps a copy of it for the batches submitted from now on (the views' seeds follow it).
  void set_plan(const Plan& plan);
  // Several outputs per sample from one read and one decode (augment/views.h): `plans`
  // are image views 1..K-1 (view 0 is set_plan's; each view's seed is view_seed(the
  // plan's seed, v), its decode settings view 0's), `masks` read each sample's second
  // file (set_mask_index) and follow view `follows`. Empty lists: one output again.
  void set_views(const std::vector<Plan>& plans, const std::vector<MaskSpec>& masks);
  // The masks' files: the same arrays as set_index, one entry per sample.
  void set_mask_index(at::Tensor path_bytes, at::Tensor path_offsets, at::Tensor file_ids, at::Tensor offsets,
                      at::Tensor sizes);

  // Queues a batch of sample indices [B] and returns its ticket at once. With `out`
  // [B, C, H, W] (any strides) the samples are augmented into it; without (cpu+gpu
  // mode) each sample's crop window is kept for wait() to pack (pinned when
  // pin_memory). `predecoded` maps slots to uint8 HWC images decoded elsewhere (PIL),
  // which skip read + decode.
  // With views (set_views), `views` holds the outputs of image views 1..K-1 ([B, C, H, W]
  // of their plans) and `masks` those of the masks (uint8 or int64, [B, H, W] or
  // [B, 1, H, W], the followed view's size); out is required then (cpu mode only).
  int64_t submit(const at::Tensor& samples, std::optional<at::Tensor> out, int64_t epoch,
                 const std::unordered_map<int64_t, at::Tensor>& predecoded, bool pin_memory,
                 const std::vector<at::Tensor>& views = {}, const std::vector<at::Tensor>& masks = {});

  // Waits for a batch, the GIL released (the caller holds it), at most `timeout_s` seconds
  // where it is > 0: nullopt when the batch is not done by then (the ticket stays valid).
  std::optional<BatchResult> wait(int64_t ticket, double timeout_s = 0);

  // The encoded bytes of samples (for decoders that run elsewhere, e.g. nvJPEG), read
  // on the calling thread with the GIL released; a failed read gives an empty tensor.
  std::pair<std::vector<at::Tensor>, std::vector<std::string>> read_samples(const at::Tensor& samples);

  void close();

 private:
  struct Task {
    std::shared_ptr<Job> job;
    int64_t slot;
  };

  // What the workers share, and wait on. Shared by the engine and each worker, so that a
  // worker left running (join_workers) outlives the engine safely, and so that a forked
  // child can leak it instead of destroying it (see ~BatchEngine).
  struct Queue {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Task> tasks;
    std::unordered_map<int64_t, std::shared_ptr<Job>> jobs;
    int64_t next_ticket = 0;
    bool closed = false;
    int running = 0;                   // workers not yet returned from work()
    std::condition_variable finished;  // notified as each worker returns
    bool timed_out = false;            // a wait() gave up on a batch: a worker may be stuck
    std::atomic<bool> timing{true};
  };

  // True in a process forked from the one that started the threads (a DataLoader worker):
  // the threads do not exist there, and a mutex may have been copied locked.
  bool forked() const;
  void check_output(const at::Tensor& out, int64_t batch, const Plan& plan) const;
  void check_views(const Job& job, std::optional<at::Tensor>& out, const std::vector<at::Tensor>& views,
                   const std::vector<at::Tensor>& masks) const;
  // The views' plans seeded from plan_ (view_seed) into views_.
  void derive_views();
  // close(), joining the workers with the GIL released where `release_gil` (the caller holds it).
  void stop(bool release_gil);
  void join_workers();
  // A worker's loop: touches only the queue and its counters, never the engine.
  static void work(const std::shared_ptr<Queue>& queue, const std::shared_ptr<ThreadTimes>& times);

  const pid_t owner_pid_;
  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  std::vector<std::thread> workers_;
  std::vector<std::shared_ptr<ThreadTimes>> times_;  // one per worker, made before it starts
  std::shared_ptr<const Index> index_;
  std::shared_ptr<const Plan> plan_;
  ViewSet view_spec_;                     // as set_views gave them
  std::shared_ptr<const ViewSet> views_;  // seeded for plan_; null: one output
  std::shared_ptr<const Index> mask_index_;
};

}  // namespace fastload::engine
