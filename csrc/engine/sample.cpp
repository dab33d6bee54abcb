// One sample's pipeline, run by a worker thread of the batch engine.
#include "engine/sample.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "augment/crop_resize_flip_normalize.h"
#include "augment/geometry.h"
#include "check.h"
#include "decode/decode_image.h"

#include <ATen/ops/empty.h>
#include <ATen/record_function.h>

namespace fastload::engine {

int64_t thread_cpu_ns(const ThreadTimes& times) {
  if (times.running.load(std::memory_order_acquire)) {
    timespec now{};
    const bool read = clock_gettime(times.cpu_clock.load(std::memory_order_relaxed), &now) == 0;
    // Still running after the read: the clock was the thread's own (an exited thread's id
    // may be reused only after it exited).
    if (read && times.running.load(std::memory_order_acquire)) return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
  }
  return times.cpu_ns_at_exit.load(std::memory_order_acquire);
}
namespace {

constexpr const char* kOp = "BatchEngine";

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
// and the origin place them in the image (see sampling_view). Runs the kernel into the
// sample's slot, or in cpu+gpu mode keeps the sampling view and its box for the device.
// Throws GeometryError for a box the kernel cannot map.
// Image view v's plan and output (view 0: the job's own).
const Plan& view_plan(const Job& job, size_t v) { return v == 0 ? *job.plan : job.views->plans[v - 1]; }
const at::Tensor& view_output(const Job& job, size_t v) { return v == 0 ? job.out : job.view_out[v - 1]; }
size_t image_views(const Job& job) { return 1 + (job.views != nullptr ? job.views->plans.size() : 0); }

void finish(Job& job, int64_t slot, const Plan& plan, const at::Tensor& out, const Region& region,
            const uint8_t* pixels, int height, int width, int channels, double scale_y, double scale_x,
            int origin_top, int origin_left, ResizeScratch& scratch) {
  if (static_cast<int64_t>(width) * channels > INT_MAX) {  // the kernel indexes a row with int
    throw GeometryError("fastload.BatchEngine: expected a decoded row under 2^31 bytes, got " +
                        std::to_string(width) + " pixels of " + std::to_string(channels) +
                        " channels. Resize such images before loading");
  }
  const SamplingView sv = sampling_view(region, height, width, scale_y, scale_x, origin_top, origin_left, kOp);
  const int64_t row_stride = static_cast<int64_t>(width) * channels;
  const ImageView view{pixels + sv.top * row_stride + static_cast<int64_t>(sv.left) * channels, sv.height,
                       sv.width, channels, row_stride};
  if (out.defined()) {
    const bool color = plan.has_color();
    augment::color::ColorPass cp = color ? color_pass_of(plan, job.epoch, job.samples[slot])
                                          : augment::color::ColorPass{};
    if (cp.pad.on) {  // RandomCrop (scale 1): its clamp is the whole image; the view lies in a window of it
      cp.pad.view_top = origin_top + sv.top;
      cp.pad.view_left = origin_left + sv.left;
      cp.pad.image_height = static_cast<int32_t>(region.clamp.height);
      cp.pad.image_width = static_cast<int32_t>(region.clamp.width);
    }
    crop_resize_flip_normalize_cpu(view, sv.box, Resample{region.flip, region.flip_v, plan.interpolation},
                                   plan.value_scale, plan.mean.data(), plan.std.data(), output_slot(out, slot),
                                   scratch, color ? &cp : nullptr);
    return;
  }
  // has_color(): any op of the uint8 stage (ColorJitter, Grayscale, RandomErasing, GaussianBlur, RandomCrop's
  // non-zero padding, TrivialAugmentWide, RandAugment, AugMix); the device kernel is given none of their parameters.
  if (plan.has_color()) {
    throw GeometryError("fastload.BatchEngine: the plan's ColorJitter, Grayscale or RandomErasing run only in the "
                        "CPU's fused pass, not on crop windows for the device. Use decode_on=\"cpu\"");
  }
  auto& pixels_out = job.windows[slot];
  const int64_t packed_row = static_cast<int64_t>(view.width) * channels;
  pixels_out.resize(static_cast<size_t>(packed_row * view.height));
  for (int y = 0; y < view.height; ++y) {
    std::memcpy(pixels_out.data() + y * packed_row, view.data + y * view.row_stride, packed_row);
  }
  job.window_sizes[slot] = {view.height, view.width};
  job.boxes[slot] = sv.box;
  job.flips[slot] = static_cast<uint8_t>((region.flip ? 1 : 0) | (region.flip_v ? 2 : 0));
}

// A box side as an int for the DCT-scale choice: a Resize to far fewer pixels than the
// image has makes boxes of more than 2^31 source pixels, beyond the int conversion.
// Capped at INT_MAX - 7 so that choose_scale_denom's ceil(side / d) cannot overflow.
int int_side(float side) { return static_cast<int>(std::min(static_cast<double>(side), INT_MAX - 7.0)); }

// Rows or columns [begin, end) of an image axis to decode.
struct Span {
  int begin, end;
};

struct DecodeWindow {
  Span rows, cols;
};

// One axis of the decode window: the source pixels a sample's output reads, never empty,
// inside the axis's `size` pixels.
Span axis_window(const Plan& plan, double box_begin, double box_extent, double clamp_begin, double clamp_extent,
                 double support, int size) {
  const double box_end = box_begin + box_extent;
  if (plan.geometry == Geometry::kRandomCrop && plan.padding_mode != kPadConstant &&
      (box_begin < 0 || box_end > size)) {
    // Edge, reflect and symmetric padding read edge or mirrored pixels, possibly far from
    // the crop (numpy.pad repeats a reflection wider than the image): the pixels every
    // position of the crop maps onto (pad_uint8_stage maps them about the image's edges).
    const int64_t first = static_cast<int64_t>(std::lround(box_begin));
    const int64_t last = first + static_cast<int64_t>(std::lround(box_extent));
    int64_t low = size - 1, high = 0;
    for (int64_t j = first; j < last && (low > 0 || high < size - 1); ++j) {
      const int64_t pixel = std::clamp<int64_t>(padded_source_index(j, size, plan.padding_mode), 0, size - 1);
      low = std::min(low, pixel);
      high = std::max(high, pixel);
    }
    return {static_cast<int>(std::min(low, high)), static_cast<int>(high) + 1};
  }
  // Decode only what the taps can reach: the clamp region, less whatever lies farther than
  // the filter's support from the sampled box. A box wholly outside the image (a crop in
  // constant padding) reads no pixel: one pixel at the nearest edge keeps the window valid.
  const double begin = std::max({0.0, clamp_begin, box_begin - support});
  const double end = std::min({static_cast<double>(size), clamp_begin + clamp_extent, box_end + support});
  const int first = static_cast<int>(std::clamp(std::floor(begin), 0.0, size - 1.0));
  const int last = static_cast<int>(std::clamp(std::ceil(end), first + 1.0, static_cast<double>(size)));
  return {first, last};
}

// The part of a height x width JPEG that a sample's region reads: its box and the
// filter's support (bicubic's is twice bilinear's; nearest's one pixel lies within
// bilinear's; a shrinking resize widens it by the scale), plus one pixel for rounding.
DecodeWindow decode_window(const Plan& plan, const Region& region, int height, int width) {
  const double filter_support = augment::filter_support(plan.interpolation);
  const double support_y =
      filter_support * augment::filter_scale(plan.interpolation, static_cast<double>(region.box.height) / plan.out_height) + 1.0;
  const double support_x =
      filter_support * augment::filter_scale(plan.interpolation, static_cast<double>(region.box.width) / plan.out_width) + 1.0;
  return {axis_window(plan, region.box.top, region.box.height, region.clamp.top, region.clamp.height, support_y,
                      height),
          axis_window(plan, region.box.left, region.box.width, region.clamp.left, region.clamp.width, support_x,
                      width)};
}

// Times one stage of one sample into its thread's counters, and shows it as a range
// ("fastload.read", ...) on this engine thread in torch.profiler traces (RECORD_FUNCTION
// costs a flag test when no profiler runs).
class StageTimer {
 public:
  using Clock = std::chrono::steady_clock;

  // No times (timing off): no clock reads at all.
  explicit StageTimer(SampleState& state)
      : times_(state.times), start_(times_ != nullptr ? Clock::now() : Clock::time_point()) {}

  // Ends the stage running since the last mark (or the start) as `stage`.
  void mark(Stage stage) {
    if (times_ == nullptr) return;
    const Clock::time_point now = Clock::now();
    times_->stage_ns[stage].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count(),
                                      std::memory_order_relaxed);
    start_ = now;
  }

 private:
  ThreadTimes* times_;
  Clock::time_point start_;
};

// The masks of a sample whose image is height x width (augment/views.h): each follows
// its view's region (state.regions), nearest-neighbour, written into its slot.
void write_masks(Job& job, int64_t slot, SampleState& state, int height, int width, StageTimer& timer) {
  if (job.views == nullptr || job.views->masks.empty()) return;
  const int64_t sample = job.samples[slot];
  const std::string path = job.mask_index->path(sample);
  try {
    read_file(path, job.mask_index->offset(sample), job.mask_index->size(sample), state.mask_bytes);
  } catch (const std::exception& error) {
    throw std::runtime_error("fastload.BatchEngine: the mask " + path + " of this sample: " + error.what());
  }
  timer.mark(kRead);
  try {
    decode_mask(state.mask_bytes.data(), state.mask_bytes.size(), job.plan->max_pixels, state.mask, state.window);
  } catch (const DecodeError& error) {
    throw DecodeError(std::string(error.what()) + " (the mask " + path + ")");
  }
  if (state.mask.height != height || state.mask.width != width) {
    throw DecodeError("fastload.BatchEngine: expected the mask " + path + " to have its image's size " +
                      std::to_string(height) + "x" + std::to_string(width) + ", got " +
                      std::to_string(state.mask.height) + "x" + std::to_string(state.mask.width) +
                      ". An image and its mask must be the same size (torchvision refuses it too)");
  }
  timer.mark(kDecode);
  RECORD_FUNCTION("fastload.augment", c10::ArrayRef<const c10::IValue>{});
  for (size_t m = 0; m < job.views->masks.size(); ++m) {
    const MaskSpec& spec = job.views->masks[m];
    const Plan& plan = view_plan(job, static_cast<size_t>(spec.follows));
    MaskAxis rows, cols;
    mask_axes(plan, state.regions[static_cast<size_t>(spec.follows)], height, width, rows, cols);
    mask_axis_table(rows, plan.out_height, spec.sampling, state.mask_rows);
    mask_axis_table(cols, plan.out_width, spec.sampling, state.mask_cols);
    const at::Tensor& out = job.mask_out[m];
    char* data = static_cast<char*>(out.data_ptr()) + slot * out.stride(0) * out.element_size();
    // CenterCrop pads with 0 whatever the fill, as torchvision's center_crop does.
    const int fill = plan.geometry == Geometry::kRandomCrop ? spec.fill : 0;
    write_mask(state.mask.pixels.data(), state.mask.width, state.mask_rows, state.mask_cols, fill, data,
               static_cast<int>(out.element_size()), out.stride(-2), out.stride(-1));
  }
  timer.mark(kAugment);
}

void process_sample(Job& job, int64_t slot, SampleState& state) {
  const Plan& plan = *job.plan;
  const int64_t sample = job.samples[slot];
  const size_t views = image_views(job);
  StageTimer timer(state);
  state.regions.resize(views);

  auto predecoded = job.predecoded.find(slot);
  if (predecoded != job.predecoded.end()) {
    const at::Tensor& image = predecoded->second;  // uint8 HWC, contiguous
    const int height = static_cast<int>(image.size(0)), width = static_cast<int>(image.size(1));
    for (size_t v = 0; v < views; ++v) state.regions[v] = region_of(view_plan(job, v), height, width, job.epoch, sample);
    {
      RECORD_FUNCTION("fastload.augment", c10::ArrayRef<const c10::IValue>{});
      for (size_t v = 0; v < views; ++v) {
        finish(job, slot, view_plan(job, v), view_output(job, v), state.regions[v], image.data_ptr<uint8_t>(), height,
               width, static_cast<int>(image.size(2)), 1.0, 1.0, 0, 0, state.scratch);
      }
    }
    timer.mark(kAugment);
    write_masks(job, slot, state, height, width, timer);
    return;
  }

  {
    RECORD_FUNCTION("fastload.read", c10::ArrayRef<const c10::IValue>{});
    read_file(job.index->path(sample), job.index->offset(sample), job.index->size(sample), state.bytes);
  }
  timer.mark(kRead);
  const uint8_t* data = state.bytes.data();
  const size_t size = state.bytes.size();
  if (!decodes_natively(data, size)) {
    job.status[slot] = static_cast<int32_t>(Status::kNotJpeg);
    return;
  }
  const ImageHeader info = read_image_header(data, size);
  // Every view's region, then one decode of the union of their windows at the DCT scale
  // that serves them all: the largest that keeps each view's output resolution.
  DecodeWindow win{{INT_MAX, 0}, {INT_MAX, 0}};
  int denom = 8;
  for (size_t v = 0; v < views; ++v) {
    const Plan& p = view_plan(job, v);
    const Region& region = state.regions[v] = region_of(p, info.height, info.width, job.epoch, sample);
    const DecodeWindow w = decode_window(p, region, info.height, info.width);
    win.rows = {std::min(win.rows.begin, w.rows.begin), std::max(win.rows.end, w.rows.end)};
    win.cols = {std::min(win.cols.begin, w.cols.begin), std::max(win.cols.end, w.cols.end)};
    const bool may_scale = p.dct_scaling && augment::antialiases(p.interpolation);
    denom = std::min(denom, !may_scale ? 1
                                       : choose_scale_denom(int_side(region.box.height), int_side(region.box.width),
                                                            p.out_height, p.out_width));
  }
  timer.mark(kHeader);

  const int win_top = win.rows.begin, win_height = win.rows.end - win.rows.begin;
  const int win_left = win.cols.begin, win_width = win.cols.end - win.cols.begin;
  DecodedWindow& window = state.window;
  {
    RECORD_FUNCTION("fastload.decode", c10::ArrayRef<const c10::IValue>{});
    decode_image_window(data, size, win_top, win_left, win_height, win_width, denom, plan.channels, plan.max_pixels,
                        state.segments, window);
  }
  timer.mark(kDecode);
  {
    RECORD_FUNCTION("fastload.augment", c10::ArrayRef<const c10::IValue>{});
    for (size_t v = 0; v < views; ++v) {
      finish(job, slot, view_plan(job, v), view_output(job, v), state.regions[v], window.pixels.data(), window.height,
             window.width, window.channels, 1.0 / window.scale_denom, 1.0 / window.scale_denom, window.top,
             window.left, state.scratch);
    }
  }
  timer.mark(kAugment);
  // (a mask's decode reuses state.window: the views are done with it)
  write_masks(job, slot, state, info.height, info.width, timer);
}

void fail(Job& job, int64_t slot, Status status, const char* message) {
  job.status[slot] = static_cast<int32_t>(status);
  job.message[slot] = message;
}

}  // namespace

void run_sample(Job& job, int64_t slot, SampleState& state) noexcept {
  if (state.times != nullptr) state.times->samples.fetch_add(1, std::memory_order_relaxed);
  try {
    process_sample(job, slot, state);
  } catch (const GeometryError& error) {
    fail(job, slot, Status::kBadGeometry, error.what());
  } catch (const DecodeError& error) {
    fail(job, slot, Status::kDecodeError, error.what());
  } catch (const c10::Error& error) {
    fail(job, slot, Status::kDecodeError, error.what_without_backtrace());
  } catch (const std::exception& error) {
    fail(job, slot, Status::kReadError, error.what());
  }
}

PackedWindows pack_windows(Job& job) {
  const int64_t batch = static_cast<int64_t>(job.windows.size());
  const int64_t channels = job.plan->channels;
  PackedWindows result;
  result.shapes = at::empty({batch, 4}, at::kLong);
  result.boxes = at::empty({batch, 4}, at::kFloat);
  // [B, 2] (left-right, top-bottom) only for a plan that flips top-bottom: a plan without
  // gives the batch op's [B] as before.
  const bool vertical = job.plan->flip_v_p > 0.0;
  result.flips = vertical ? at::empty({batch, 2}, at::kBool) : at::empty({batch}, at::kBool);
  int64_t total = 0;
  for (int64_t i = 0; i < batch; ++i) {
    if (job.windows[i].empty()) {  // a failed sample: one black pixel keeps the kernel valid
      job.windows[i].assign(static_cast<size_t>(channels), 0);
      job.window_sizes[i] = {1, 1};
      job.boxes[i] = Box{0.f, 0.f, 1.f, 1.f};
    }
    total += static_cast<int64_t>(job.windows[i].size());
  }
  result.packed =
      at::empty({std::max<int64_t>(total, 1)}, at::TensorOptions().dtype(at::kByte).pinned_memory(job.pin_memory));
  int64_t offset = 0;
  for (int64_t i = 0; i < batch; ++i) {
    const auto& window = job.windows[i];
    std::memcpy(result.packed.data_ptr<uint8_t>() + offset, window.data(), window.size());
    const auto [height, width] = job.window_sizes[i];
    const int64_t shape[4] = {offset, height, width, width * channels};
    std::copy(shape, shape + 4, result.shapes.data_ptr<int64_t>() + 4 * i);
    const Box& box = job.boxes[i];
    const float box_values[4] = {box.top, box.left, box.height, box.width};
    std::copy(box_values, box_values + 4, result.boxes.data_ptr<float>() + 4 * i);
    if (vertical) {
      result.flips.data_ptr<bool>()[2 * i] = (job.flips[i] & 1) != 0;
      result.flips.data_ptr<bool>()[2 * i + 1] = (job.flips[i] & 2) != 0;
    } else {
      result.flips.data_ptr<bool>()[i] = (job.flips[i] & 1) != 0;
    }
    offset += static_cast<int64_t>(window.size());
  }
  return result;
}

}  // namespace fastload::engine
