// The batch engine's thread pool.
//
// One Python call submits a batch (sample indices + the output tensor); worker threads
// take its samples from a FIFO queue shared by every batch in flight, so a new batch
// starts while the last samples of the previous one finish (no idle tail). wait()
// releases the GIL. Per-sample status comes back to Python, which owns the error policy.
#include "engine/batch.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
#include <ATen/record_function.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>

#include "check.h"
#include "engine/gil.h"

namespace fastload::engine {
namespace {

// How long close() waits for the workers once a batch timed out (join_workers).
constexpr std::chrono::seconds kStuckWorkerWait{2};

}  // namespace

BatchEngine::BatchEngine(int num_threads) : owner_pid_(::getpid()) {
  FASTLOAD_CHECK_VALUE(num_threads >= 1, "BatchEngine", "expected num_threads >= 1, got ", num_threads, ".");
  for (int i = 0; i < num_threads; ++i) times_.push_back(std::make_shared<ThreadTimes>());
  queue_->running = num_threads;
  for (int i = 0; i < num_threads; ++i) {
    workers_.emplace_back([queue = queue_, times = times_[i]] {
      work(queue, times);
      std::lock_guard<std::mutex> lock(queue->mutex);
      --queue->running;
      queue->finished.notify_all();
    });
  }
}

bool BatchEngine::forked() const { return ::getpid() != owner_pid_; }

BatchEngine::~BatchEngine() {
  // Joins holding the GIL where the caller holds it (workers never take it): a destructor
  // is noexcept, so it must not take the GIL back, which can end the thread at exit.
  stop(/*release_gil=*/false);
  if (forked()) {
    // The parent's idle workers were blocked in queue_->cv.wait() at the fork: glibc's
    // copy of the condition variable still counts them as waiters, so destroying it
    // here would block forever; a copied mutex may be locked; a job's `done` may have a
    // parent thread waiting in wait(). None of these may be destroyed in the child:
    // leak them all (the process's exit reclaims the memory).
    new std::shared_ptr<Queue>(std::move(queue_));  // never destroyed
  }
}

namespace {

std::shared_ptr<const Index> make_index(const char* op, at::Tensor path_bytes, at::Tensor path_offsets,
                                        at::Tensor file_ids, at::Tensor offsets, at::Tensor sizes);

}  // namespace

void BatchEngine::set_index(at::Tensor path_bytes, at::Tensor path_offsets, at::Tensor file_ids, at::Tensor offsets,
                            at::Tensor sizes) {
  index_ = make_index("BatchEngine.set_index", path_bytes, path_offsets, file_ids, offsets, sizes);
}

void BatchEngine::set_mask_index(at::Tensor path_bytes, at::Tensor path_offsets, at::Tensor file_ids,
                                 at::Tensor offsets, at::Tensor sizes) {
  mask_index_ = make_index("BatchEngine.set_mask_index", path_bytes, path_offsets, file_ids, offsets, sizes);
}

namespace {

std::shared_ptr<const Index> make_index(const char* op, at::Tensor path_bytes, at::Tensor path_offsets,
                                        at::Tensor file_ids, at::Tensor offsets, at::Tensor sizes) {
  for (const auto* t : {&path_offsets, &file_ids, &offsets, &sizes}) {
    FASTLOAD_CHECK_VALUE(t->scalar_type() == at::kLong && t->dim() == 1 && t->is_contiguous(), op,
                         "expected contiguous 1-D int64 arrays, got ", t->scalar_type(), " ", t->sizes(), ".");
  }
  FASTLOAD_CHECK_VALUE(path_bytes.scalar_type() == at::kByte && path_bytes.is_contiguous(), op,
                       "expected path bytes as contiguous uint8.");
  const int64_t n = file_ids.numel();
  FASTLOAD_CHECK_VALUE(offsets.numel() == n && sizes.numel() == n, op,
                       "expected file_ids, offsets and sizes of one length, got ", n, ", ", offsets.numel(), " and ",
                       sizes.numel(), ".");
  const int64_t files = path_offsets.numel() - 1;
  FASTLOAD_CHECK_VALUE(files >= 0 && (n == 0 || (file_ids.min().item<int64_t>() >= 0 &&
                                                  file_ids.max().item<int64_t>() < files)),
                       op, "expected file ids in [0, ", files, "). The sample index is corrupt: rebuild it.");
  FASTLOAD_CHECK_VALUE(files < 0 || (path_offsets.diff().min().item<int64_t>() >= 0 &&
                                     path_offsets[0].item<int64_t>() >= 0 &&
                                     path_offsets[files].item<int64_t>() <= path_bytes.numel()) ||
                           files == 0,
                       op, "expected increasing path offsets within the path bytes. The sample index is corrupt: rebuild it.");
  for (const auto* t : {&path_bytes, &path_offsets, &file_ids, &offsets, &sizes}) {
    FASTLOAD_CHECK_VALUE(t->device().is_cpu(), op, "expected CPU arrays, got one on ", t->device(), ".");
  }
  auto index = std::make_shared<Index>();
  *index = Index{path_bytes, path_offsets, file_ids, offsets, sizes};
  return index;
}

}  // namespace

void BatchEngine::set_plan(const Plan& plan) {
  plan.validate("BatchEngine.set_plan");
  plan_ = std::make_shared<const Plan>(plan);
  derive_views();
}

void BatchEngine::set_views(const std::vector<Plan>& plans, const std::vector<MaskSpec>& masks) {
  const char* op = "BatchEngine.set_views";
  FASTLOAD_CHECK(plan_ != nullptr, op, "expected set_plan() (view 0) before set_views().");
  const int image_views = 1 + static_cast<int>(plans.size());
  for (const Plan& plan : plans) {
    plan.validate(op);
    FASTLOAD_CHECK_VALUE(plan.channels == plan_->channels, op, "expected every view with view 0's ", plan_->channels,
                         " channels (one decode serves them all), got ", plan.channels, ".");
  }
  for (const MaskSpec& mask : masks) {
    FASTLOAD_CHECK_VALUE(mask.follows >= 0 && mask.follows < image_views, op, "expected a mask to follow an image "
                         "view in [0, ", image_views, "), got ", mask.follows, ".");
    FASTLOAD_CHECK_VALUE(mask.fill >= 0 && mask.fill <= 255, op, "expected a mask fill in [0, 255] (uint8 labels), "
                         "got ", mask.fill, ".");
    FASTLOAD_CHECK_VALUE(mask.sampling == MaskSampling::kPil || mask.sampling == MaskSampling::kTensor ||
                             mask.sampling == MaskSampling::kCv2,
                         op, "expected mask sampling PIL, TENSOR or CV2, got ", static_cast<int>(mask.sampling), ".");
    const Plan& followed = mask.follows == 0 ? *plan_ : plans[static_cast<size_t>(mask.follows) - 1];
    FASTLOAD_CHECK_VALUE(followed.geometry != Geometry::kRandomCrop || followed.padding_mode == kPadConstant, op,
                         "expected a mask to follow a RandomCrop with constant padding, got padding_mode ",
                         followed.padding_mode, ". Pass padding_mode=\"constant\" (and the mask's fill)");
  }
  view_spec_ = ViewSet{plans, masks};
  derive_views();
}

void BatchEngine::derive_views() {
  if (view_spec_.plans.empty() && view_spec_.masks.empty()) {
    views_ = nullptr;
    return;
  }
  auto views = std::make_shared<ViewSet>(view_spec_);
  for (size_t v = 0; v < views->plans.size(); ++v) {
    Plan& plan = views->plans[v];
    plan.seed = view_seed(plan_->seed, static_cast<int64_t>(v) + 1);
    plan.dct_scaling = plan_->dct_scaling;
    plan.max_pixels = plan_->max_pixels;
  }
  views_ = std::move(views);
}

void BatchEngine::check_output(const at::Tensor& out, int64_t batch, const Plan& plan) const {
  const char* op = "BatchEngine.submit";
  FASTLOAD_CHECK_VALUE(out.dim() == 4 && out.size(0) == batch && out.device().is_cpu() &&
                           out.size(1) == plan.channels && out.size(2) == plan.out_height &&
                           out.size(3) == plan.out_width,
                       op, "expected out of shape [", batch, ", ", plan.channels, ", ", plan.out_height, ", ",
                       plan.out_width, "] on the CPU, got ", out.sizes(), " on ", out.device(), ".");
  FASTLOAD_CHECK_VALUE(at::has_internal_overlap(out) != at::MemOverlap::Yes, op,
                       "expected an out tensor whose elements do not overlap (threads write it "
                       "concurrently), got strides ", out.strides(), ". Pass a fresh tensor.");
  const auto dtype = out.scalar_type();
  FASTLOAD_CHECK_VALUE(dtype == at::kByte || dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16, op,
                       "expected out of dtype uint8, float32, float16 or bfloat16, got ", dtype, ".");
}

void BatchEngine::check_views(const Job& job, std::optional<at::Tensor>& out, const std::vector<at::Tensor>& views,
                              const std::vector<at::Tensor>& masks) const {
  const char* op = "BatchEngine.submit";
  const int64_t batch = static_cast<int64_t>(job.samples.size());
  if (views_ == nullptr) {
    FASTLOAD_CHECK_VALUE(views.empty() && masks.empty(), op, "expected no view or mask outputs without set_views(), "
                         "got ", views.size(), " and ", masks.size(), ".");
    return;
  }
  FASTLOAD_CHECK_VALUE(out.has_value(), op, "expected out with views: several views per sample run in the CPU's "
                       "fused pass only. Use decode_on=\"cpu\"");
  FASTLOAD_CHECK_VALUE(views.size() == views_->plans.size() && masks.size() == views_->masks.size(), op,
                       "expected ", views_->plans.size(), " view outputs and ", views_->masks.size(),
                       " mask outputs (set_views), got ", views.size(), " and ", masks.size(), ".");
  FASTLOAD_CHECK_VALUE(masks.empty() || mask_index_ != nullptr, op, "expected set_mask_index() before submitting "
                       "masks.");
  if (mask_index_ != nullptr && !masks.empty()) {
    for (int64_t s : job.samples) {
      FASTLOAD_CHECK_VALUE(s < mask_index_->samples(), op, "expected sample indices in [0, ", mask_index_->samples(),
                           ") of the mask index, got ", s, ".");
    }
  }
  for (size_t v = 0; v < views.size(); ++v) check_output(views[v], batch, views_->plans[v]);
  for (size_t m = 0; m < masks.size(); ++m) {
    const at::Tensor& mask = masks[m];
    const int follows = views_->masks[m].follows;
    const Plan& plan = follows == 0 ? *plan_ : views_->plans[static_cast<size_t>(follows) - 1];
    const bool shaped = (mask.dim() == 3 || (mask.dim() == 4 && mask.size(1) == 1)) && mask.size(0) == batch &&
                        mask.size(-2) == plan.out_height && mask.size(-1) == plan.out_width;
    FASTLOAD_CHECK_VALUE(shaped && mask.device().is_cpu() &&
                             (mask.scalar_type() == at::kByte || mask.scalar_type() == at::kLong),
                         op, "expected mask ", m, " as uint8 or int64 [", batch, ", ", plan.out_height, ", ",
                         plan.out_width, "] (or [B, 1, H, W]) on the CPU, got ", mask.scalar_type(), " ", mask.sizes(),
                         " on ", mask.device(), ".");
    FASTLOAD_CHECK_VALUE(at::has_internal_overlap(mask) != at::MemOverlap::Yes, op,
                         "expected a mask tensor whose elements do not overlap, got strides ", mask.strides(), ".");
  }
}

int64_t BatchEngine::submit(const at::Tensor& samples, std::optional<at::Tensor> out, int64_t epoch,
                            const std::unordered_map<int64_t, at::Tensor>& predecoded, bool pin_memory,
                            const std::vector<at::Tensor>& views, const std::vector<at::Tensor>& masks) {
  const char* op = "BatchEngine.submit";
  FASTLOAD_CHECK(!forked(), op, "expected the process that made the engine, got a forked child "
                 "(its threads do not exist here). Make fastload loaders inside the worker instead.");
  FASTLOAD_CHECK(plan_ != nullptr, op, "expected set_plan() before submit().");
  FASTLOAD_CHECK(index_ != nullptr || predecoded.size() == static_cast<size_t>(samples.numel()), op,
                 "expected set_index() before submit().");
  FASTLOAD_CHECK_VALUE(samples.dim() == 1 && samples.scalar_type() == at::kLong && samples.device().is_cpu(), op,
                       "expected samples as 1-D int64 on the CPU, got ", samples.sizes(), " ", samples.scalar_type(),
                       " on ", samples.device(), ".");
  if (out.has_value()) check_output(*out, samples.size(0), *plan_);
  auto job = std::make_shared<Job>();
  job->index = index_;
  job->plan = plan_;
  job->views = views_;
  job->mask_index = mask_index_;
  const auto samples_c = samples.contiguous();
  job->samples.assign(samples_c.data_ptr<int64_t>(), samples_c.data_ptr<int64_t>() + samples_c.numel());
  if (index_ != nullptr) {
    const int64_t n = index_->samples();
    for (int64_t s : job->samples) {
      FASTLOAD_CHECK_VALUE(0 <= s && s < n, op, "expected sample indices in [0, ", n, "), got ", s, ".");
    }
  }
  for (const auto& [slot, image] : predecoded) {
    FASTLOAD_CHECK_VALUE(0 <= slot && slot < samples.size(0) && image.dim() == 3 && image.device().is_cpu() &&
                             image.scalar_type() == at::kByte && image.size(2) == plan_->channels &&
                             image.size(0) > 0 && image.size(1) > 0 && image.size(0) <= INT_MAX &&
                             image.size(1) <= INT_MAX,
                         op, "expected predecoded images as uint8 [H, W, ", plan_->channels,
                         "] with 0 < H, W < 2^31, got ", image.sizes(), ".");
    job->predecoded.emplace(slot, image.contiguous());
  }
  check_views(*job, out, views, masks);
  job->view_out = views;
  job->mask_out = masks;
  const size_t batch = job->samples.size();
  if (out.has_value()) {
    job->out = std::move(*out);
  } else {
    job->windows.resize(batch);
    job->window_sizes.assign(batch, {0, 0});
    job->boxes.assign(batch, Box{0.f, 0.f, 0.f, 0.f});
    job->flips.assign(batch, 0);
  }
  job->pin_memory = pin_memory;
  job->epoch = epoch;
  if (at::hasThreadLocalCallbacks()) job->profiling.emplace();
  job->status.assign(job->samples.size(), static_cast<int32_t>(Status::kOk));
  job->message.assign(job->samples.size(), std::string());
  job->remaining = static_cast<int64_t>(job->samples.size());

  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    FASTLOAD_CHECK(!queue_->closed, op, "the engine is closed.");
    ticket = queue_->next_ticket++;
    queue_->jobs.emplace(ticket, job);
    for (int64_t slot = 0; slot < job->remaining; ++slot) queue_->tasks.push_back({job, slot});
  }
  queue_->cv.notify_all();
  return ticket;
}

std::optional<BatchResult> BatchEngine::wait(int64_t ticket, double timeout_s) {
  // In a forked child no worker would ever finish the job: refuse rather than hang.
  FASTLOAD_CHECK(!forked(), "BatchEngine.wait", "expected the process that made the engine, got a forked "
                 "child (its threads do not exist here). Make fastload loaders inside the worker instead.");
  FASTLOAD_CHECK_VALUE(std::isfinite(timeout_s) && timeout_s >= 0, "BatchEngine.wait",
                       "expected a timeout >= 0 seconds (0: no limit), got ", timeout_s, ".");
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    auto it = queue_->jobs.find(ticket);
    FASTLOAD_CHECK_VALUE(it != queue_->jobs.end(), "BatchEngine.wait", "unknown or already collected ticket ", ticket,
                         ".");
    job = it->second;
    queue_->jobs.erase(it);
  }
  BatchResult result;
  bool done = true;
  {
    GilRelease no_gil;
    {
      std::unique_lock<std::mutex> lock(job->mutex);
      const auto finished = [&] { return job->remaining == 0; };
      if (timeout_s > 0) {
        done = job->done.wait_for(lock, std::chrono::duration<double>(timeout_s), finished);
      } else {
        job->done.wait(lock, finished);
      }
    }
    if (done && !job->out.defined()) result.windows = pack_windows(*job);
  }
  if (!done) {  // the ticket stays valid: wait again, or leave the job to finish
    std::lock_guard<std::mutex> lock(queue_->mutex);
    queue_->jobs.emplace(ticket, job);
    queue_->timed_out = true;
    return std::nullopt;
  }
  // Drop the job's Python-made tensors here, with the GIL: a worker may hold the last
  // reference to the job a moment longer, and must not free them.
  job->predecoded.clear();
  job->out = at::Tensor();
  job->view_out.clear();
  job->mask_out.clear();
  const int64_t batch = static_cast<int64_t>(job->status.size());
  result.status = at::from_blob(job->status.data(), {batch}, at::kInt).clone();
  result.messages = job->message;
  return result;
}

std::pair<std::vector<at::Tensor>, std::vector<std::string>> BatchEngine::read_samples(const at::Tensor& samples) {
  const std::shared_ptr<const Index> index = index_;  // kept alive while the GIL is released
  FASTLOAD_CHECK(index != nullptr, "BatchEngine.read_samples", "expected set_index() first.");
  const auto samples_c = samples.to(at::kLong).contiguous();
  const int64_t n = samples_c.numel();
  std::vector<at::Tensor> datas(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  GilRelease no_gil;
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t sample = samples_c.data_ptr<int64_t>()[i];
    try {
      FASTLOAD_CHECK_VALUE(0 <= sample && sample < index->samples(), "BatchEngine.read_samples", "sample ", sample,
                           " out of range.");
      read_file(index->path(sample), index->offset(sample), index->size(sample), bytes);
      datas[i] = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
      std::memcpy(datas[i].data_ptr<uint8_t>(), bytes.data(), bytes.size());
    } catch (const std::exception& error) {
      datas[i] = at::empty({0}, at::kByte);
      errors[i] = error.what();
    }
  }
  return {datas, errors};
}

void BatchEngine::close() { stop(/*release_gil=*/PyGILState_Check() != 0); }

void BatchEngine::stop(bool release_gil) {
  if (forked()) {
    // Neither join (no such threads here) nor lock: leave the copies to the process's
    // exit (the destructor leaks the queue too, see there).
    new std::vector<std::thread>(std::move(workers_));  // never destroyed: no std::terminate
    workers_.clear();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    if (queue_->closed) return;
    queue_->closed = true;
  }
  queue_->cv.notify_all();
  // Workers never take the GIL, but callers of close() may hold it: let other Python
  // threads run while joining.
  if (release_gil) {
    GilRelease no_gil;
    join_workers();
  } else {
    join_workers();
  }
}

void BatchEngine::join_workers() {
  bool stuck = false;
  {
    std::unique_lock<std::mutex> lock(queue_->mutex);
    if (queue_->timed_out) {
      // A batch outlived the caller's timeout: a worker may be blocked for good in a read
      // (a hung network file system, a FIFO). Joining it would hang the caller (the loader
      // at exit, its destructor): give the workers a moment to drain, then leave the ones
      // still running to end on their own.
      stuck = !queue_->finished.wait_for(lock, kStuckWorkerWait, [&] { return queue_->running == 0; });
    }
  }
  if (stuck) {
    for (auto& worker : workers_) worker.detach();  // each keeps the queue and its counters alive
    workers_.clear();
    return;
  }
  for (auto& worker : workers_) worker.join();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> BatchEngine::thread_times() const {
  const int64_t threads = static_cast<int64_t>(times_.size());
  at::Tensor seconds = at::zeros({threads, kStageCount}, at::kDouble);
  at::Tensor samples = at::zeros({threads}, at::kLong);
  at::Tensor cpu = at::zeros({threads}, at::kDouble);
  for (int64_t t = 0; t < threads; ++t) {
    for (int stage = 0; stage < kStageCount; ++stage) {
      seconds.data_ptr<double>()[t * kStageCount + stage] =
          1e-9 * static_cast<double>(times_[t]->stage_ns[stage].load(std::memory_order_relaxed));
    }
    samples.data_ptr<int64_t>()[t] = times_[t]->samples.load(std::memory_order_relaxed);
    cpu.data_ptr<double>()[t] = 1e-9 * static_cast<double>(thread_cpu_ns(*times_[t]));
  }
  return {seconds, samples, cpu};
}

void BatchEngine::work(const std::shared_ptr<Queue>& queue, const std::shared_ptr<ThreadTimes>& times_owner) {
  ThreadTimes* times = times_owner.get();
  clockid_t clock = 0;
  if (pthread_getcpuclockid(pthread_self(), &clock) == 0) {
    times->cpu_clock.store(clock, std::memory_order_relaxed);
    times->running.store(true, std::memory_order_release);
  }
  struct Exit {  // the final CPU figure, kept before the clock goes away
    ThreadTimes* times;
    ~Exit() {
      timespec now{};
      if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) == 0) {
        times->cpu_ns_at_exit.store(int64_t{now.tv_sec} * 1000000000 + now.tv_nsec, std::memory_order_release);
      }
      times->running.store(false, std::memory_order_release);
    }
  } exit{times};
  SampleState state;
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(queue->mutex);
      queue->cv.wait(lock, [&] { return queue->closed || !queue->tasks.empty(); });
      if (queue->tasks.empty()) return;  // closed and drained
      task = std::move(queue->tasks.front());
      queue->tasks.pop_front();
    }
    Job& job = *task.job;
    state.times = queue->timing.load(std::memory_order_relaxed) ? times : nullptr;
    {
      std::optional<at::ThreadLocalStateGuard> profiling;
      if (job.profiling) profiling.emplace(*job.profiling);
      run_sample(job, task.slot, state);  // never throws: every error is the sample's status
    }
    {
      std::lock_guard<std::mutex> lock(job.mutex);
      if (--job.remaining == 0) job.done.notify_all();
    }
  }
}

}  // namespace fastload::engine
