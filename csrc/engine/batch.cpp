// The batch engine: read + decode + augment whole batches on a C++ thread pool.
//
// One Python call submits a batch (sample indices + the output tensor); worker threads
// take its samples from a FIFO queue shared by every batch in flight, so a new batch
// starts while the last samples of the previous one finish (no idle tail). wait()
// releases the GIL. Per-sample status comes back to Python, which owns the error policy.
#include "engine/batch.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <fcntl.h>
#include <pybind11/stl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>  // jpeglib.h needs FILE
#include <cstring>
#include <deque>
#include <jpeglib.h>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "augment/crop_resize_flip_normalize_checks.h"
#include "augment/crop_resize_flip_normalize_cpu.h"
#include "check.h"
#include "decode/decode_jpeg.h"
#include "engine/plan.h"

namespace py = pybind11;

namespace fastload::engine {
namespace {

// Per-sample outcome, mirrored by fastload/native.py. kBadGeometry: the plan gives this
// image no pixels to sample (e.g. a resize to 0 rows, an empty crop), which torchvision
// refuses too; like a decode error it goes through the loader's on_error policy.
enum Status : int32_t { kOk = 0, kDecodeError = 1, kNotJpeg = 2, kReadError = 3, kBadGeometry = 4 };

// Where samples' bytes live: views of the SampleIndex's numpy arrays (kept alive here).
struct Index {
  at::Tensor path_bytes, path_offsets, file_ids, offsets, sizes;

  std::string path(int64_t sample) const {
    const int64_t file = file_ids.data_ptr<int64_t>()[sample];
    const int64_t* bounds = path_offsets.data_ptr<int64_t>() + file;
    const char* base = reinterpret_cast<const char*>(path_bytes.data_ptr<uint8_t>());
    return std::string(base + bounds[0], base + bounds[1]);
  }
};

struct Job {
  std::shared_ptr<const Index> index;
  std::shared_ptr<const Plan> plan;
  std::vector<int64_t> samples;
  std::unordered_map<int64_t, at::Tensor> predecoded;  // slot -> uint8 HWC (PIL fallback)
  at::Tensor out;  // augment mode: [B, C, H, W]; undefined in windows mode
  // Windows mode (decode_on="cpu+gpu"): each sample's decoded view, its box and flip;
  // the device's kernel resizes and normalises them.
  std::vector<std::vector<uint8_t>> windows;
  std::vector<std::array<int64_t, 2>> window_sizes;  // (height, width)
  std::vector<Box> boxes;
  std::vector<uint8_t> flips;
  bool pin_memory = false;
  int64_t epoch = 0;
  std::vector<int32_t> status;
  std::vector<std::string> message;
  int64_t remaining = 0;  // guarded by mutex
  std::mutex mutex;
  std::condition_variable done;
};

// Buffers each worker thread reuses across samples.
struct ThreadState {
  std::vector<uint8_t> bytes;
  DecodedWindow window;
  ResizeScratch scratch;
};

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

OutputView output_slot(const at::Tensor& out, int64_t slot) {
  OutputView view;
  view.data = static_cast<char*>(out.data_ptr()) + slot * out.stride(0) * out.element_size();
  view.dtype = out.scalar_type();
  view.channels = static_cast<int>(out.size(1));
  view.height = static_cast<int>(out.size(2));
  view.width = static_cast<int>(out.size(3));
  view.stride_c = out.stride(1);
  view.stride_y = out.stride(2);
  view.stride_x = out.stride(3);
  return view;
}

// Finishes one sample from its decoded (possibly scaled, windowed) pixels: `scale_y/x`
// map full-resolution coordinates to the decoded image's (1/d at DCT scale 1/d: scaled
// pixel k covers full-resolution pixels [k d, k d + d), the last one partly, so the
// image's ceil(h / d) scaled rows hold [0, h / d) -- not scaled_h / h), and pixel (0, 0)
// of `pixels` is at (origin_top, origin_left) of the scaled whole image. Augment mode
// runs the kernel into the sample's slot; windows mode keeps the clamp view and its box
// for the device. Throws GeometryError for a box the kernel cannot map.
void finish(Job& job, int64_t slot, const SourceRegion& region, const uint8_t* pixels, int height,
            int width, int channels, double scale_y, double scale_x, int origin_top,
            int origin_left, ResizeScratch& scratch) {
  const Plan& plan = *job.plan;
  // The clamp region in decoded pixels, rounded outwards, then clamped so that the view
  // is never empty and never starts or ends outside the decoded pixels, whatever the
  // rounding of the region (its taps then clamp to what was decoded).
  const auto first_index = [](double v, int size) {
    return static_cast<int>(std::clamp(std::floor(v + 1e-6), 0.0, static_cast<double>(size - 1)));
  };
  const auto end_index = [](double v, int begin, int size) {
    return static_cast<int>(std::clamp(std::ceil(v - 1e-6), static_cast<double>(begin + 1), static_cast<double>(size)));
  };
  if (static_cast<int64_t>(width) * channels > INT_MAX) {  // the kernel indexes a row with int
    throw GeometryError("fastload.BatchEngine: expected a decoded row under 2^31 bytes, got " +
                        std::to_string(width) + " pixels of " + std::to_string(channels) +
                        " channels. Resize such images before loading");
  }
  if (!box_valid(region.clamp.top, region.clamp.left, region.clamp.height, region.clamp.width)) {
    throw GeometryError("fastload.BatchEngine: expected a finite clamp region with height, width > 0, got [" +
                        std::to_string(region.clamp.top) + ", " + std::to_string(region.clamp.left) + ", " +
                        std::to_string(region.clamp.height) + ", " + std::to_string(region.clamp.width) + "]");
  }
  const double clamp_top = static_cast<double>(region.clamp.top) * scale_y - origin_top;
  const double clamp_left = static_cast<double>(region.clamp.left) * scale_x - origin_left;
  const double clamp_bottom =
      (static_cast<double>(region.clamp.top) + region.clamp.height) * scale_y - origin_top;
  const double clamp_right =
      (static_cast<double>(region.clamp.left) + region.clamp.width) * scale_x - origin_left;
  const int row0 = first_index(clamp_top, height), col0 = first_index(clamp_left, width);
  const int row1 = end_index(clamp_bottom, row0, height), col1 = end_index(clamp_right, col0, width);
  const int64_t row_stride = static_cast<int64_t>(width) * channels;
  ImageView view{pixels + row0 * row_stride + static_cast<int64_t>(col0) * channels, row1 - row0, col1 - col0,
                 channels, row_stride};
  Box box{static_cast<float>(region.box.top * scale_y - origin_top - row0),
          static_cast<float>(region.box.left * scale_x - origin_left - col0),
          static_cast<float>(region.box.height * scale_y),
          static_cast<float>(region.box.width * scale_x)};
  if (!box_valid(box.top, box.left, box.height, box.width)) {
    throw GeometryError(
        "fastload.BatchEngine: expected a finite crop box with height, width > 0 in the decoded image, got [" +
        std::to_string(box.top) + ", " + std::to_string(box.left) + ", " + std::to_string(box.height) + ", " +
        std::to_string(box.width) + "]. The plan's crop is too small for this image");
  }
  if (job.out.defined()) {
    crop_resize_flip_normalize_cpu(view, box, region.flip, plan.value_scale, plan.mean.data(),
                                   plan.std.data(), output_slot(job.out, slot), scratch);
    return;
  }
  auto& pixels_out = job.windows[slot];
  const int64_t packed_row = static_cast<int64_t>(view.width) * channels;
  pixels_out.resize(static_cast<size_t>(packed_row * view.height));
  for (int y = 0; y < view.height; ++y) {
    std::memcpy(pixels_out.data() + y * packed_row, view.data + y * view.row_stride, packed_row);
  }
  job.window_sizes[slot] = {view.height, view.width};
  job.boxes[slot] = box;
  job.flips[slot] = region.flip;
}

// A box side as an int for the DCT-scale choice: a Resize to far fewer pixels than the
// image has makes boxes of more than 2^31 source pixels, beyond the int conversion.
// Capped at INT_MAX - 7 so that choose_scale_denom's ceil(side / d) cannot overflow.
int int_side(float side) { return static_cast<int>(std::min(static_cast<double>(side), INT_MAX - 7.0)); }

void process_sample(Job& job, int64_t slot, ThreadState& state) {
  const Plan& plan = *job.plan;
  const int64_t sample = job.samples[slot];

  auto predecoded = job.predecoded.find(slot);
  if (predecoded != job.predecoded.end()) {
    const at::Tensor& image = predecoded->second;  // uint8 HWC, contiguous
    const int height = static_cast<int>(image.size(0)), width = static_cast<int>(image.size(1));
    const SourceRegion region = plan_region(plan, height, width, job.epoch, sample);
    finish(job, slot, region, image.data_ptr<uint8_t>(), height, width, static_cast<int>(image.size(2)),
           1.0, 1.0, 0, 0, state.scratch);
    return;
  }

  read_file(job.index->path(sample), job.index->offsets.data_ptr<int64_t>()[sample],
            job.index->sizes.data_ptr<int64_t>()[sample], state.bytes);
  const uint8_t* data = state.bytes.data();
  const size_t size = state.bytes.size();
  if (!is_jpeg(data, size)) {
    job.status[slot] = kNotJpeg;
    return;
  }
  const JpegInfo info = read_jpeg_info(data, size);
  const SourceRegion region = plan_region(plan, info.height, info.width, job.epoch, sample);

  // Decode only what the taps can reach: the clamp region, less whatever lies farther
  // than the filter's support from the sampled box.
  const double support_y = std::max(1.0, static_cast<double>(region.box.height) / plan.out_height) + 1.0;
  const double support_x = std::max(1.0, static_cast<double>(region.box.width) / plan.out_width) + 1.0;
  const double top = std::max<double>({0.0, region.clamp.top, region.box.top - support_y});
  const double left = std::max<double>({0.0, region.clamp.left, region.box.left - support_x});
  const double bottom = std::min<double>({static_cast<double>(info.height), region.clamp.top + region.clamp.height,
                                          region.box.top + region.box.height + support_y});
  const double right = std::min<double>({static_cast<double>(info.width), region.clamp.left + region.clamp.width,
                                         region.box.left + region.box.width + support_x});
  const int win_top = static_cast<int>(std::floor(top));
  const int win_left = static_cast<int>(std::floor(left));
  const int win_height = std::max(1, static_cast<int>(std::ceil(bottom)) - win_top);
  const int win_width = std::max(1, static_cast<int>(std::ceil(right)) - win_left);
  const int denom = plan.exact ? 1
                               : choose_scale_denom(int_side(region.box.height), int_side(region.box.width),
                                                    plan.out_height, plan.out_width);
  DecodedWindow& window = state.window;
  decode_jpeg_window(data, size, win_top, win_left, win_height, win_width, denom, plan.channels,
                     plan.max_pixels, window);
  finish(job, slot, region, window.pixels.data(), window.height, window.width, window.channels,
         1.0 / window.scale_denom, 1.0 / window.scale_denom, window.top, window.left, state.scratch);
}

Plan plan_from_config(const py::dict& config) {
  Plan plan;
  plan.geometry = static_cast<Geometry>(config["geometry"].cast<int>());
  plan.out_height = config["out_height"].cast<int>();
  plan.out_width = config["out_width"].cast<int>();
  plan.scale_min = config["scale_min"].cast<double>();
  plan.scale_max = config["scale_max"].cast<double>();
  plan.ratio_min = config["ratio_min"].cast<double>();
  plan.ratio_max = config["ratio_max"].cast<double>();
  plan.resize_short = config["resize_short"].cast<int>();
  plan.resize_height = config["resize_height"].cast<int>();
  plan.resize_width = config["resize_width"].cast<int>();
  plan.max_size = config["max_size"].cast<int>();
  plan.flip_p = config["flip_p"].cast<double>();
  plan.value_scale = config["value_scale"].cast<float>();
  plan.mean = config["mean"].cast<std::vector<float>>();
  plan.std = config["std"].cast<std::vector<float>>();
  plan.channels = config["channels"].cast<int>();
  plan.exact = config["exact"].cast<bool>();
  plan.max_pixels = config["max_pixels"].cast<int64_t>();
  plan.seed = config["seed"].cast<int64_t>();
  const char* op = "BatchEngine.set_plan";
  FASTLOAD_CHECK_VALUE(plan.channels == 1 || plan.channels == 3, op, "expected 1 or 3 channels, got ",
                       plan.channels, ".");
  FASTLOAD_CHECK_VALUE(static_cast<int>(plan.mean.size()) == plan.channels &&
                           static_cast<int>(plan.std.size()) == plan.channels,
                       op, "expected one mean and std per channel, got ", plan.mean.size(), " and ",
                       plan.std.size(), " for ", plan.channels, " channels.");
  FASTLOAD_CHECK_VALUE(plan.out_height > 0 && plan.out_width > 0, op, "expected a positive output size, got ",
                       plan.out_height, "x", plan.out_width, ".");
  FASTLOAD_CHECK_VALUE(std::isfinite(plan.scale_min) && std::isfinite(plan.scale_max) && 0 <= plan.scale_min &&
                           plan.scale_min <= plan.scale_max && std::isfinite(plan.ratio_min) &&
                           std::isfinite(plan.ratio_max) && 0 < plan.ratio_min && plan.ratio_min <= plan.ratio_max,
                       op, "expected finite 0 <= scale_min <= scale_max and 0 < ratio_min <= ratio_max, got scale (",
                       plan.scale_min, ", ", plan.scale_max, "), ratio (", plan.ratio_min, ", ", plan.ratio_max, ").");
  // torchvision refuses this when resizing; the plan refuses it once, up front.
  FASTLOAD_CHECK_VALUE(plan.max_size <= 0 || plan.resize_short <= 0 || plan.max_size > plan.resize_short, op,
                       "expected max_size strictly greater than the requested size for the smaller edge, got "
                       "max_size = ", plan.max_size, " and size = ", plan.resize_short, ".");
  FASTLOAD_CHECK_VALUE((plan.resize_height > 0) == (plan.resize_width > 0), op,
                       "expected both or neither of resize_height and resize_width, got ", plan.resize_height,
                       " and ", plan.resize_width, ".");
  return plan;
}

// (box, clamp, flip) of one sample: the geometry the engine will apply, for Python's
// reference path and tests.
py::tuple region_of(const py::dict& config, int height, int width, int64_t epoch, int64_t index) {
  FASTLOAD_CHECK_VALUE(height > 0 && width > 0, "plan_region", "expected a positive image size, got ",
                       height, "x", width, ".");
  const SourceRegion region = plan_region(plan_from_config(config), height, width, epoch, index);
  auto box = [](const Box& b) { return py::make_tuple(b.top, b.left, b.height, b.width); };
  return py::make_tuple(box(region.box), box(region.clamp), region.flip);
}

// Packs a windows-mode job's views into one uint8 buffer (one copy, pinned if asked).
void pack_windows(Job& job, at::Tensor& packed, at::Tensor& shapes, at::Tensor& boxes, at::Tensor& flips) {
  const int64_t batch = static_cast<int64_t>(job.windows.size());
  const int64_t channels = job.plan->channels;
  shapes = at::empty({batch, 4}, at::kLong);
  boxes = at::empty({batch, 4}, at::kFloat);
  flips = at::empty({batch}, at::kBool);
  int64_t total = 0;
  for (int64_t i = 0; i < batch; ++i) {
    if (job.windows[i].empty()) {  // a failed sample: one black pixel keeps the kernel valid
      job.windows[i].assign(static_cast<size_t>(channels), 0);
      job.window_sizes[i] = {1, 1};
      job.boxes[i] = Box{0.f, 0.f, 1.f, 1.f};
    }
    total += static_cast<int64_t>(job.windows[i].size());
  }
  packed = at::empty({std::max<int64_t>(total, 1)}, at::TensorOptions().dtype(at::kByte).pinned_memory(job.pin_memory));
  int64_t offset = 0;
  for (int64_t i = 0; i < batch; ++i) {
    const auto& window = job.windows[i];
    std::memcpy(packed.data_ptr<uint8_t>() + offset, window.data(), window.size());
    const auto [height, width] = job.window_sizes[i];
    const int64_t shape[4] = {offset, height, width, width * channels};
    std::copy(shape, shape + 4, shapes.data_ptr<int64_t>() + 4 * i);
    const Box& box = job.boxes[i];
    const float box_values[4] = {box.top, box.left, box.height, box.width};
    std::copy(box_values, box_values + 4, boxes.data_ptr<float>() + 4 * i);
    flips.data_ptr<bool>()[i] = job.flips[i] != 0;
    offset += static_cast<int64_t>(window.size());
  }
}

// Geometry of a batch: boxes [N, 4], clamps [N, 4] (float32, full-resolution pixels) and
// flips [N] for image sizes [N, 2] (height, width) of samples [N].
py::tuple regions_of(const py::dict& config, const at::Tensor& sizes, const at::Tensor& samples, int64_t epoch) {
  const char* op = "plan_regions";
  FASTLOAD_CHECK_VALUE(sizes.dim() == 2 && sizes.size(1) == 2 && samples.dim() == 1 &&
                           samples.size(0) == sizes.size(0),
                       op, "expected sizes [N, 2] and samples [N], got ", sizes.sizes(), " and ", samples.sizes(), ".");
  const Plan plan = plan_from_config(config);
  const auto sizes_c = sizes.to(at::kLong).contiguous();
  const auto samples_c = samples.to(at::kLong).contiguous();
  const int64_t n = samples.size(0);
  auto boxes = at::empty({n, 4}, at::kFloat);
  auto clamps = at::empty({n, 4}, at::kFloat);
  auto flips = at::empty({n}, at::kBool);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t height = sizes_c.data_ptr<int64_t>()[2 * i];
    const int64_t width = sizes_c.data_ptr<int64_t>()[2 * i + 1];
    FASTLOAD_CHECK_VALUE(height > 0 && width > 0 && height <= INT_MAX && width <= INT_MAX, op,
                         "expected image sizes in [1, 2^31), got ", height, "x", width, ".");
    const SourceRegion region = plan_region(plan, static_cast<int>(height), static_cast<int>(width), epoch,
                                            samples_c.data_ptr<int64_t>()[i]);
    const float b[8] = {region.box.top, region.box.left, region.box.height, region.box.width,
                        region.clamp.top, region.clamp.left, region.clamp.height, region.clamp.width};
    std::copy(b, b + 4, boxes.data_ptr<float>() + 4 * i);
    std::copy(b + 4, b + 8, clamps.data_ptr<float>() + 4 * i);
    flips.data_ptr<bool>()[i] = region.flip;
  }
  return py::make_tuple(boxes, clamps, flips);
}

class BatchEngine {
 public:
  explicit BatchEngine(int num_threads) {
    FASTLOAD_CHECK_VALUE(num_threads >= 1, "BatchEngine", "expected num_threads >= 1, got ",
                         num_threads, ".");
    for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { work(); });
  }

  // True in a process forked from the one that started the threads (a DataLoader worker):
  // the threads do not exist there, and a mutex may have been copied locked.
  bool forked() const { return ::getpid() != owner_pid_; }

  ~BatchEngine() {
    close();
    if (forked()) {
      // The parent's idle workers were blocked in queue_->cv.wait() at the fork: glibc's
      // copy of the condition variable still counts them as waiters, so destroying it
      // here would block forever; a copied mutex may be locked; a job's `done` may have a
      // parent thread waiting in wait(). None of these may be destroyed in the child:
      // leak them all (the process's exit reclaims the memory).
      queue_.release();
    }
  }

  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()); }

  void set_index(at::Tensor path_bytes, at::Tensor path_offsets, at::Tensor file_ids,
                 at::Tensor offsets, at::Tensor sizes) {
    for (const auto* t : {&path_offsets, &file_ids, &offsets, &sizes}) {
      FASTLOAD_CHECK_VALUE(t->scalar_type() == at::kLong && t->dim() == 1 && t->is_contiguous(),
                           "BatchEngine.set_index", "expected contiguous 1-D int64 arrays, got ",
                           t->scalar_type(), " ", t->sizes(), ".");
    }
    FASTLOAD_CHECK_VALUE(path_bytes.scalar_type() == at::kByte && path_bytes.is_contiguous(),
                         "BatchEngine.set_index", "expected path bytes as contiguous uint8.");
    const char* op = "BatchEngine.set_index";
    const int64_t n = file_ids.numel();
    FASTLOAD_CHECK_VALUE(offsets.numel() == n && sizes.numel() == n, op,
                         "expected file_ids, offsets and sizes of one length, got ", n, ", ",
                         offsets.numel(), " and ", sizes.numel(), ".");
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
    index_ = std::move(index);
  }

  void check_output(const at::Tensor& out, int64_t batch) const {
    const char* op = "BatchEngine.submit";
    FASTLOAD_CHECK_VALUE(out.dim() == 4 && out.size(0) == batch && out.device().is_cpu() &&
                             out.size(1) == plan_->channels && out.size(2) == plan_->out_height &&
                             out.size(3) == plan_->out_width,
                         op, "expected out of shape [", batch, ", ", plan_->channels, ", ",
                         plan_->out_height, ", ", plan_->out_width, "] on the CPU, got ", out.sizes(),
                         " on ", out.device(), ".");
    FASTLOAD_CHECK_VALUE(at::has_internal_overlap(out) != at::MemOverlap::Yes, op,
                         "expected an out tensor whose elements do not overlap (threads write it "
                         "concurrently), got strides ", out.strides(), ". Pass a fresh tensor.");
    const auto dtype = out.scalar_type();
    FASTLOAD_CHECK_VALUE(dtype == at::kByte || dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16,
                         op, "expected out of dtype uint8, float32, float16 or bfloat16, got ", dtype, ".");
  }

  void set_plan(const py::dict& config) { plan_ = std::make_shared<const Plan>(plan_from_config(config)); }

  // Queues a batch of sample indices [B]. Augment mode: into out [B, C, H, W] (any
  // strides). Windows mode (out is None): keeps each sample's decoded view for wait() to
  // pack (pinned when pin_memory). `predecoded` maps slots to uint8 HWC images decoded
  // elsewhere (PIL), which skip read + decode.
  int64_t submit(const at::Tensor& samples, std::optional<at::Tensor> out, int64_t epoch,
                 const std::unordered_map<int64_t, at::Tensor>& predecoded, bool pin_memory) {
    const char* op = "BatchEngine.submit";
    FASTLOAD_CHECK(!forked(), op, "expected the process that made the engine, got a forked child "
                   "(its threads do not exist here). Make fastload loaders inside the worker instead.");
    FASTLOAD_CHECK(plan_ != nullptr, op, "expected set_plan() before submit().");
    FASTLOAD_CHECK(index_ != nullptr || predecoded.size() == static_cast<size_t>(samples.numel()),
                   op, "expected set_index() before submit().");
    FASTLOAD_CHECK_VALUE(samples.dim() == 1 && samples.scalar_type() == at::kLong && samples.device().is_cpu(), op,
                         "expected samples as 1-D int64 on the CPU, got ", samples.sizes(), " ",
                         samples.scalar_type(), " on ", samples.device(), ".");
    if (out.has_value()) check_output(*out, samples.size(0));
    auto job = std::make_shared<Job>();
    job->index = index_;
    job->plan = plan_;
    const auto samples_c = samples.contiguous();
    job->samples.assign(samples_c.data_ptr<int64_t>(), samples_c.data_ptr<int64_t>() + samples_c.numel());
    if (index_ != nullptr) {
      const int64_t n = index_->file_ids.numel();
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
    job->status.assign(job->samples.size(), kOk);
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

  // Waits for a batch (GIL released). Returns (status int32 [B], messages) in augment
  // mode; in windows mode also (packed uint8, shapes int64 [B, 4] = (offset, height,
  // width, row_stride), boxes float32 [B, 4], flips bool [B]): the inputs of
  // crop_resize_flip_normalize_batch.
  py::tuple wait(int64_t ticket) {
    // In a forked child no worker would ever finish the job: refuse rather than hang.
    FASTLOAD_CHECK(!forked(), "BatchEngine.wait", "expected the process that made the engine, got a forked "
                   "child (its threads do not exist here). Make fastload loaders inside the worker instead.");
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(queue_->mutex);
      auto it = queue_->jobs.find(ticket);
      FASTLOAD_CHECK_VALUE(it != queue_->jobs.end(), "BatchEngine.wait", "unknown or already collected ticket ",
                           ticket, ".");
      job = it->second;
      queue_->jobs.erase(it);
    }
    at::Tensor packed, shapes, boxes, flips;
    {
      py::gil_scoped_release no_gil;
      {
        std::unique_lock<std::mutex> lock(job->mutex);
        job->done.wait(lock, [&] { return job->remaining == 0; });
      }
      if (!job->out.defined()) pack_windows(*job, packed, shapes, boxes, flips);
    }
    // Drop the job's Python-made tensors here, with the GIL: a worker may hold the last
    // reference to the job a moment longer, and must not free them.
    job->predecoded.clear();
    const at::Tensor out = std::move(job->out);
    job->out = at::Tensor();
    const int64_t batch = static_cast<int64_t>(job->status.size());
    auto status = at::from_blob(job->status.data(), {batch}, at::kInt).clone();
    if (out.defined()) return py::make_tuple(status, job->message);
    return py::make_tuple(status, job->message, packed, shapes, boxes, flips);
  }

  // The encoded bytes of samples (for decoders that run elsewhere, e.g. nvJPEG), read
  // on the calling thread with the GIL released; a failed read gives an empty tensor.
  std::pair<std::vector<at::Tensor>, std::vector<std::string>> read_samples(const at::Tensor& samples) {
    const std::shared_ptr<const Index> index = index_;  // kept alive while the GIL is released
    FASTLOAD_CHECK(index != nullptr, "BatchEngine.read_samples", "expected set_index() first.");
    const auto samples_c = samples.to(at::kLong).contiguous();
    const int64_t n = samples_c.numel();
    std::vector<at::Tensor> datas(static_cast<size_t>(n));
    std::vector<std::string> errors(static_cast<size_t>(n));
    py::gil_scoped_release no_gil;
    std::vector<uint8_t> bytes;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t sample = samples_c.data_ptr<int64_t>()[i];
      try {
        FASTLOAD_CHECK_VALUE(0 <= sample && sample < index->file_ids.numel(), "BatchEngine.read_samples",
                             "sample ", sample, " out of range.");
        read_file(index->path(sample), index->offsets.data_ptr<int64_t>()[sample],
                  index->sizes.data_ptr<int64_t>()[sample], bytes);
        datas[i] = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
        std::memcpy(datas[i].data_ptr<uint8_t>(), bytes.data(), bytes.size());
      } catch (const std::exception& error) {
        datas[i] = at::empty({0}, at::kByte);
        errors[i] = error.what();
      }
    }
    return {datas, errors};
  }

  void close() {
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
    // threads run while joining (the destructor can run without it, at shutdown).
    if (PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      for (auto& worker : workers_) worker.join();
    } else {
      for (auto& worker : workers_) worker.join();
    }
  }

 private:
  struct Task {
    std::shared_ptr<Job> job;
    int64_t slot;
  };

  void work() {
    ThreadState state;
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(queue_->mutex);
        queue_->cv.wait(lock, [&] { return queue_->closed || !queue_->tasks.empty(); });
        if (queue_->tasks.empty()) return;  // closed and drained
        task = std::move(queue_->tasks.front());
        queue_->tasks.pop_front();
      }
      Job& job = *task.job;
      try {
        process_sample(job, task.slot, state);
      } catch (const GeometryError& error) {
        job.status[task.slot] = kBadGeometry;
        job.message[task.slot] = error.what();
      } catch (const DecodeError& error) {
        job.status[task.slot] = kDecodeError;
        job.message[task.slot] = error.what();
      } catch (const c10::Error& error) {
        job.status[task.slot] = kDecodeError;
        job.message[task.slot] = error.what_without_backtrace();
      } catch (const std::exception& error) {
        job.status[task.slot] = kReadError;
        job.message[task.slot] = error.what();
      }
      {
        std::lock_guard<std::mutex> lock(job.mutex);
        if (--job.remaining == 0) job.done.notify_all();
      }
    }
  }

  // What the workers share, and wait on. Held by pointer so that a forked child can
  // leak it instead of destroying it (see ~BatchEngine).
  struct Queue {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Task> tasks;
    std::unordered_map<int64_t, std::shared_ptr<Job>> jobs;
    int64_t next_ticket = 0;
    bool closed = false;
  };

  const pid_t owner_pid_ = ::getpid();
  std::unique_ptr<Queue> queue_ = std::make_unique<Queue>();
  std::vector<std::thread> workers_;
  std::shared_ptr<const Index> index_;
  std::shared_ptr<const Plan> plan_;
};

}  // namespace

py::dict build_info() {
  py::dict info;
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
  // Chosen at run time (CPU features, FASTLOAD_NO_AVX2), not at build time.
  info["augment_cpu_path"] = crop_resize_flip_normalize_cpu_path();
#if defined(__clang__)
  info["compiler"] = "clang " __clang_version__;
#elif defined(__GNUC__)
  info["compiler"] = "gcc " __VERSION__;
#endif
  return info;
}

void bind(py::module_& module) {
  py::class_<BatchEngine>(module, "BatchEngine",
                          "Thread pool that reads, decodes and augments whole batches (see "
                          "fastload/native.py).")
      .def(py::init<int>(), py::arg("num_threads"))
      .def_property_readonly("num_threads", &BatchEngine::num_threads)
      .def("set_index", &BatchEngine::set_index, py::arg("path_bytes"), py::arg("path_offsets"),
           py::arg("file_ids"), py::arg("offsets"), py::arg("sizes"))
      .def("set_plan", &BatchEngine::set_plan, py::arg("config"))
      .def("submit", &BatchEngine::submit, py::arg("samples"), py::arg("out"), py::arg("epoch"),
           py::arg("predecoded") = std::unordered_map<int64_t, at::Tensor>(),
           py::arg("pin_memory") = false)
      .def("wait", &BatchEngine::wait, py::arg("ticket"))
      .def("read_samples", &BatchEngine::read_samples, py::arg("samples"))
      .def("close", &BatchEngine::close);
  module.def("plan_regions", &regions_of, py::arg("config"), py::arg("sizes"), py::arg("samples"),
             py::arg("epoch"), "Batched plan_region: (boxes, clamps, flips) as tensors.");
  module.def("plan_region", &region_of, py::arg("config"), py::arg("height"), py::arg("width"),
             py::arg("epoch"), py::arg("index"),
             "(box, clamp, flip) of one sample under a plan, in full-resolution pixels.");
}

}  // namespace fastload::engine
