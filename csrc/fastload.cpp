// fastload._C: every operator schema, and every pybind11 binding, live here.
//
// Backend kernels register with TORCH_LIBRARY_IMPL in their own files (decode/,
// augment/); fake (meta) kernels live in fastload/_meta.py. Every enum, limit and default
// Python shares with the C++ side is bound here from its one C++ definition (bind_contract),
// so no Python module retypes one. The batch engine
// (engine/batch.h) is a stateful thread pool, not a tensor op, so it is exposed as a
// pybind11 class whose blocking calls release the GIL; the plan it runs, the geometry
// functions Python shares with it, and the per-sample status are bound beside it, each
// once, so no Python module mirrors them.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <pybind11/stl.h>
// pybind11 with torch's type casters (Tensor, ScalarType, Device), and the operator
// registry: not torch/extension.h, which adds the whole C++ frontend (torch::nn, optim)
// and doubles this file's compile time.
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <climits>
#include <cstddef>
#include <cstring>
#include <cstdio>  // jpeglib.h needs FILE and size_t
#include <jpeglib.h>  // JPEG_LIB_VERSION for build_info
#include <optional>
#include <string>
#include <unordered_map>

#include "augment/augmix.h"
#include "augment/autoaugment.h"
#include "augment/blur.h"
#include "augment/crop_resize_flip_normalize_cpu.h"
#include "augment/geometry.h"
#include "augment/plan.h"
#include "augment/views.h"
#include "check.h"
#include "decode/decode_jpeg.h"
#include "decode/transcode.h"
#include "engine/batch.h"
#include "engine/gil.h"
#include "engine/sample.h"

namespace py = pybind11;

#define FASTLOAD_STRINGIFY_(x) #x
#define FASTLOAD_STRINGIFY(x) FASTLOAD_STRINGIFY_(x)
// The schemas' max_pixels default, spelt from decode_jpeg.h's one definition.
#define FASTLOAD_MAX_PIXELS_ARG "int max_pixels=" FASTLOAD_STRINGIFY(FASTLOAD_DEFAULT_MAX_PIXELS)

TORCH_LIBRARY(fastload, m) {
  // ---- decode (csrc/decode) -------------------------------------------------
  // Header only: int64 [5] = (height, width, components, jpeg_color_space, progressive).
  // A tensor, not int[], so that its fake kernel has a shape to give.
  m.def("jpeg_header(Tensor data) -> Tensor");
  // Decodes rows/columns window=[top, left, height, width] (full-resolution pixels;
  // [] = whole image) at 1/scale_denom (1, 2, 4 or 8) to uint8 HWC with `channels`
  // (1 or 3) channels. Returns exactly the window, scaled: ceil-rounded edges.
  m.def(
      "decode_jpeg(Tensor data, int[] window=[], int scale_denom=1, int channels=3, "
      FASTLOAD_MAX_PIXELS_ARG ") -> Tensor");
  // PNG (libpng): rows/columns window=[top, left, height, width] ([] = whole image) as
  // PIL gives them: mode "RGB" (convert("RGB"): uint8 [H, W, 3]), "L" (convert("L"):
  // [H, W, 1]) or "mask" (np.array of a mode 1 / L / P file: uint8 [H, W], palette
  // indices; other files refused). Built without libpng, it raises saying so.
  m.def("decode_png(Tensor data, int[] window=[], str mode=\"RGB\", " FASTLOAD_MAX_PIXELS_ARG ") -> Tensor");
  // nvJPEG batched decode of whole images (CPU bytes in): uint8 [H, W, channels] CUDA
  // tensors on the current stream, and a bool [N] CPU tensor: True where nvJPEG could not
  // take the sample and the CPU decoder did it (uploaded). Same limits as decode_jpeg.
  m.def(
      "decode_jpeg_cuda(Tensor[] datas, int channels=3, Device device=\"cuda\", "
      FASTLOAD_MAX_PIXELS_ARG ") -> (Tensor[], Tensor)");

  // ---- prepared JPEGs (csrc/decode/transcode.h) ------------------------------
  // Lossless DCT-domain transcode to a prepared JPEG: baseline, optimised Huffman
  // tables, a restart marker every restart_rows MCU rows. Returns (jpeg uint8 [N],
  // segments int64 [K + 1, 2]); see csrc/decode/transcode.h for the index.
  m.def("transcode_jpeg(Tensor data, int restart_rows=1, " FASTLOAD_MAX_PIXELS_ARG ") -> (Tensor, Tensor)");
  // decode_jpeg's result for the window of a prepared JPEG, entropy-decoding only the
  // restart segments its rows need.
  m.def(
      "decode_jpeg_rows(Tensor jpeg, Tensor segments, int[] window=[], int scale_denom=1, int channels=3, "
      FASTLOAD_MAX_PIXELS_ARG ") -> Tensor");

  // ---- augment (csrc/augment) -----------------------------------------------
  // image: uint8 HWC (channel and column strides packed, any row stride).
  // box: [top, left, height, width] floats in image pixels. Output pixel centres map
  // linearly onto the box; taps (interpolation: 0 bilinear, 1 bicubic, 2 nearest,
  // Pillow's antialiased filters; 3 bilinear without antialiasing, OpenCV's INTER_LINEAR)
  // clamp to the image (not the box); centres outside the image read 0 (padding). flip mirrors left-right, flip_v top-bottom. value =
  // (v * scale - mean[c]) / std[c], v in [0, 255]; then cast (uint8: round + saturate).
  // Returns [C, size[0], size[1]] (channels_last memory when channels_last).
  m.def(
      "crop_resize_flip_normalize(Tensor image, float[] box, int[] size, bool flip, "
      "float scale, float[] mean, float[] std, ScalarType dtype, bool channels_last, "
      "bool flip_v=False, int interpolation=0) -> Tensor");
  // Batched, in place: images is packed uint8 (1-D); shapes int64 [N, 4] =
  // (offset, height, width, row_stride) of each HWC image in it; boxes float32 [N, 4];
  // flips bool [N] (left-right) or [N, 2] (left-right, top-bottom); mean/std float32
  // [C]; out [N, C, H, W] of any strides; interpolation as above, for every sample.
  // color: uint8 [N, K] per-sample colour records (ColorJitter, grayscale, erasing;
  // fastload._C.color_passes), on out's device; None: no colour ops.
  m.def(
      "crop_resize_flip_normalize_batch(Tensor images, Tensor shapes, Tensor boxes, "
      "Tensor flips, float scale, Tensor mean, Tensor std, Tensor(a!) out, int interpolation=0, "
      "Tensor? color=None) -> ()");

  // ---- colour (csrc/augment/color.h) ------------------------------------------
  // image: HWC [H, W, 1 or 3], uint8 (torchvision's PIL semantics) or float32 in [0, 1]
  // (its tensor semantics); packed pixels, any row stride. Returns a new HWC image.
  m.def("adjust_brightness(Tensor image, float factor) -> Tensor");
  m.def("adjust_contrast(Tensor image, float factor) -> Tensor");
  m.def("adjust_saturation(Tensor image, float factor) -> Tensor");
  m.def("adjust_hue(Tensor image, float factor) -> Tensor");
  // ColorJitter with drawn parameters: order = 4 op ids, factors[op] (NaN = off).
  m.def("color_jitter(Tensor image, int[] order, float[] factors) -> Tensor");
  m.def("rgb_to_grayscale(Tensor image, int num_output_channels) -> Tensor");
  // float32 HWC image; box (top, left, height, width); value [] = random normals.
  m.def("erase(Tensor image, int[] box, float[] value, int seed, int epoch, int index) -> Tensor");
  // Random parameters, pure functions of (seed, epoch, index):
  // (order int64 [N, 4], factors float32 [N, 4]); ranges = (min, max) per op, NaN pair = off.
  m.def("color_jitter_params(Tensor indices, int seed, int epoch, float[] ranges, float p=1.) -> (Tensor, Tensor)");
  m.def("random_grayscale_params(Tensor indices, int seed, int epoch, float p) -> Tensor");
  // Boxes int64 [N, 4] (top, left, height, width), zeros = nothing erased.
  m.def(
      "random_erasing_params(Tensor indices, int seed, int epoch, int height, int width, "
      "float p, float[] scale, float[] ratio) -> Tensor");

  // ---- whole-image stage (csrc/augment/{blur,autoaugment,augmix}_cpu.cpp) ---------
  // image: uint8 HWC [H, W, 1 or 3]. kernel_size: (x, y), odd, at most BLUR_MAX_KERNEL.
  m.def("gaussian_blur(Tensor image, int[] kernel_size, float sigma) -> Tensor");
  // sigma float32 [N] per sample (0 = not blurred), a pure function of (seed, epoch, index).
  m.def("gaussian_blur_params(Tensor indices, int seed, int epoch, float sigma_min, float sigma_max, float p=1.) -> Tensor");
  // ops: AugmentOp ids (fastload._C.AUGMENT_OPS); the affine ops fill with `fill` ([] = 0).
  m.def("auto_augment(Tensor image, int[] ops, float[] magnitudes, int[] fill=[], bool bilinear=False) -> Tensor");
  // (ops int64 [N, num_ops], magnitudes float64 [N, num_ops]) drawn from the space
  // (space_ops, magnitudes: a row of bins per op) as TrivialAugmentWide / RandAugment do;
  // with policy_ops / policy_probs / policy_bins (AutoAugment's sub-policies, [policies x
  // 2]) as AutoAugment does: [N, 2] by slot, op -1 where not applied.
  m.def(
      "auto_augment_params(Tensor indices, int seed, int epoch, int[] space_ops, float[] magnitudes, int num_ops=1, "
      "int magnitude_bin=-1, int[] policy_ops=[], float[] policy_probs=[], int[] policy_bins=[]) -> (Tensor, Tensor)");
  // One op of an AugMix chain on a uint8 HWC image (torchvision's tensor ops: grid_sample).
  m.def("augmix_step(Tensor image, int op, float magnitude, bool bilinear=True) -> Tensor");
  // (weights float32 [N, width + 1], depths int64 [N, width], ops int64 [N, width,
  // AUGMIX_MAX_DEPTH], magnitudes float64 [N, width, AUGMIX_MAX_DEPTH]) per sample.
  m.def(
      "augmix_params(Tensor indices, int seed, int epoch, int[] space_ops, float[] magnitudes, int severity=3, "
      "int width=3, int chain_depth=-1, float alpha=1.) -> (Tensor, Tensor, Tensor, Tensor)");
}

namespace fastload {
namespace {

py::tuple box_tuple(const Box& b) { return py::make_tuple(b.top, b.left, b.height, b.width); }

// A caller that reads only the left-right flip must not get a plan that also flips
// top-bottom: it would drop that flip without a word.
void check_vertical(const Plan& plan, bool vertical, const char* op) {
  FASTLOAD_CHECK_VALUE(vertical || plan.flip_v_p <= 0.0, op, "expected vertical=True for a plan that flips top-bottom (flip_v_p = ",
                       plan.flip_v_p, "), got vertical=False. Pass vertical=True and apply both flips.");
}

// (box, clamp, flip) of one sample, or (box, clamp, flip, flip_v) with vertical=True:
// the geometry the engine applies, for Python's generic twin of a plan and for tests.
py::tuple region_tuple(const Plan& plan, int height, int width, int64_t epoch, int64_t index, bool vertical) {
  FASTLOAD_CHECK_VALUE(height > 0 && width > 0, "region_of", "expected a positive image size, got ", height, "x",
                       width, ".");
  plan.validate("region_of");
  check_vertical(plan, vertical, "region_of");
  const Region region = region_of(plan, height, width, epoch, index);
  if (vertical) return py::make_tuple(box_tuple(region.box), box_tuple(region.clamp), region.flip, region.flip_v);
  return py::make_tuple(box_tuple(region.box), box_tuple(region.clamp), region.flip);
}

// The colour records of samples [N] under a plan (uint8 [N, sizeof(ColorPass)]): what
// the engine draws per sample, for the batch op's `color`.
at::Tensor color_passes(const Plan& plan, const at::Tensor& samples, int64_t epoch) {
  const char* op = "color_passes";
  FASTLOAD_CHECK_VALUE(samples.dim() == 1, op, "expected samples [N], got ", samples.sizes(), ".");
  plan.validate(op);
  const auto samples_c = samples.to(at::kLong).contiguous();
  const int64_t n = samples.size(0);
  const int64_t record = static_cast<int64_t>(sizeof(augment::color::ColorPass));
  auto out = at::empty({n, record}, at::kByte);
  for (int64_t i = 0; i < n; ++i) {
    const augment::color::ColorPass cp = color_pass_of(plan, epoch, samples_c.data_ptr<int64_t>()[i]);
    std::memcpy(out.data_ptr<uint8_t>() + i * record, &cp, sizeof(cp));
  }
  return out;
}

// Geometry of a batch: boxes [N, 4], clamps [N, 4] (float32, full-resolution pixels) and
// flips [N] (vertical=True: [N, 2], left-right and top-bottom, as the batch op takes
// them) for image sizes [N, 2] (height, width) of samples [N].
py::tuple regions_tuple(const Plan& plan, const at::Tensor& sizes, const at::Tensor& samples, int64_t epoch,
                        bool vertical) {
  const char* op = "regions_of";
  FASTLOAD_CHECK_VALUE(sizes.dim() == 2 && sizes.size(1) == 2 && samples.dim() == 1 && samples.size(0) == sizes.size(0),
                       op, "expected sizes [N, 2] and samples [N], got ", sizes.sizes(), " and ", samples.sizes(), ".");
  plan.validate(op);
  check_vertical(plan, vertical, op);
  const auto sizes_c = sizes.to(at::kLong).contiguous();
  const auto samples_c = samples.to(at::kLong).contiguous();
  const int64_t n = samples.size(0);
  auto boxes = at::empty({n, 4}, at::kFloat);
  auto clamps = at::empty({n, 4}, at::kFloat);
  auto flips = vertical ? at::empty({n, 2}, at::kBool) : at::empty({n}, at::kBool);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t height = sizes_c.data_ptr<int64_t>()[2 * i];
    const int64_t width = sizes_c.data_ptr<int64_t>()[2 * i + 1];
    FASTLOAD_CHECK_VALUE(height > 0 && width > 0 && height <= INT_MAX && width <= INT_MAX, op,
                         "expected image sizes in [1, 2^31), got ", height, "x", width, ".");
    const Region region = region_of(plan, static_cast<int>(height), static_cast<int>(width), epoch,
                                    samples_c.data_ptr<int64_t>()[i]);
    const float b[8] = {region.box.top,   region.box.left,   region.box.height,   region.box.width,
                        region.clamp.top, region.clamp.left, region.clamp.height, region.clamp.width};
    std::copy(b, b + 4, boxes.data_ptr<float>() + 4 * i);
    std::copy(b + 4, b + 8, clamps.data_ptr<float>() + 4 * i);
    if (vertical) {
      flips.data_ptr<bool>()[2 * i] = region.flip;
      flips.data_ptr<bool>()[2 * i + 1] = region.flip_v;
    } else {
      flips.data_ptr<bool>()[i] = region.flip;
    }
  }
  return py::make_tuple(boxes, clamps, flips);
}

// sampling_view for a batch of whole decoded images (scale 1/scale_denom, origin per
// row or (0, 0)): views int64 [N, 4] (top, left, height, width) and the boxes relative
// to them, float32 [N, 4].
py::tuple sampling_views(const at::Tensor& boxes, const at::Tensor& clamps, const at::Tensor& sizes,
                         int64_t scale_denom, const std::optional<at::Tensor>& origins) {
  const char* op = "sampling_views";
  FASTLOAD_CHECK_VALUE(boxes.dim() == 2 && boxes.size(1) == 4 && clamps.dim() == 2 && clamps.size(1) == 4 &&
                           sizes.dim() == 2 && sizes.size(1) == 2 && clamps.size(0) == boxes.size(0) &&
                           sizes.size(0) == boxes.size(0),
                       op, "expected boxes [N, 4], clamps [N, 4] and sizes [N, 2], got ", boxes.sizes(), ", ",
                       clamps.sizes(), " and ", sizes.sizes(), ".");
  FASTLOAD_CHECK_VALUE(scale_denom == 1 || scale_denom == 2 || scale_denom == 4 || scale_denom == 8, op,
                       "expected scale_denom 1, 2, 4 or 8, got ", scale_denom, ".");
  const int64_t n = boxes.size(0);
  FASTLOAD_CHECK_VALUE(!origins.has_value() || (origins->dim() == 2 && origins->size(0) == n && origins->size(1) == 2),
                       op, "expected origins [", n, ", 2] (top, left), got ", origins->sizes(), ".");
  const auto boxes_c = boxes.to(at::kFloat).contiguous(), clamps_c = clamps.to(at::kFloat).contiguous();
  const auto sizes_c = sizes.to(at::kLong).contiguous();
  const auto origins_c = origins.has_value() ? origins->to(at::kLong).contiguous() : at::zeros({n, 2}, at::kLong);
  auto views = at::empty({n, 4}, at::kLong);
  auto relative = at::empty({n, 4}, at::kFloat);
  const double scale = 1.0 / static_cast<double>(scale_denom);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t height = sizes_c.data_ptr<int64_t>()[2 * i], width = sizes_c.data_ptr<int64_t>()[2 * i + 1];
    const int64_t origin_top = origins_c.data_ptr<int64_t>()[2 * i];
    const int64_t origin_left = origins_c.data_ptr<int64_t>()[2 * i + 1];
    FASTLOAD_CHECK_VALUE(height > 0 && width > 0 && height <= INT_MAX && width <= INT_MAX, op,
                         "expected image sizes in [1, 2^31), got ", height, "x", width, " in row ", i, ".");
    FASTLOAD_CHECK_VALUE(0 <= origin_top && origin_top <= INT_MAX && 0 <= origin_left && origin_left <= INT_MAX, op,
                         "expected origins in [0, 2^31), got (", origin_top, ", ", origin_left, ") in row ", i, ".");
    const float* b = boxes_c.data_ptr<float>() + 4 * i;
    const float* c = clamps_c.data_ptr<float>() + 4 * i;
    Region region{Box{b[0], b[1], b[2], b[3]}, Box{c[0], c[1], c[2], c[3]}, false};
    SamplingView view;
    try {
      view = sampling_view(region, static_cast<int>(height), static_cast<int>(width), scale, scale,
                           static_cast<int>(origin_top), static_cast<int>(origin_left), op);
    } catch (const GeometryError& error) {
      throw py::value_error(std::string(error.what()) + " (row " + std::to_string(i) + ")");
    }
    const int64_t v[4] = {view.top, view.left, view.height, view.width};
    std::copy(v, v + 4, views.data_ptr<int64_t>() + 4 * i);
    const float r[4] = {view.box.top, view.box.left, view.box.height, view.box.width};
    std::copy(r, r + 4, relative.data_ptr<float>() + 4 * i);
  }
  return py::make_tuple(views, relative);
}

py::dict build_info() {
  py::dict info;
  info["libjpeg_turbo"] = FASTLOAD_JPEG_VERSION;
  info["libjpeg_api"] = JPEG_LIB_VERSION;
#ifdef FASTLOAD_PNG_VERSION
  info["libpng"] = FASTLOAD_PNG_VERSION;  // PNG decoded in C++ (else by PIL, in Python)
#else
  info["libpng"] = py::none();
#endif
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

void bind_plan(py::module_& m) {
  py::enum_<Geometry>(m, "Geometry", "How a plan maps an image onto its output.")
      .value("RANDOM_RESIZED_CROP", Geometry::kRandomResizedCrop, "crop (scale, ratio), then resize to out")
      .value("RESIZE_CENTER_CROP", Geometry::kResizeCenterCrop, "resize (shorter side or fixed), then centre crop")
      .value("RANDOM_CROP", Geometry::kRandomCrop, "zero padding, then a random crop of the output size");
  py::enum_<Interpolation>(m, "Interpolation",
                           "A plan's resampling filter: Pillow's (antialiased when shrinking) or plain bilinear; int() of a "
                           "value is the ops' interpolation argument.")
      .value("BILINEAR", Interpolation::kBilinear, "Pillow BILINEAR: triangle filter, support 1")
      .value("BICUBIC", Interpolation::kBicubic, "Pillow BICUBIC: cubic a = -0.5, support 2, clipped to [0, 255]")
      .value("NEAREST", Interpolation::kNearest, "Pillow NEAREST: the source pixel under the centre")
      .value("BILINEAR_NO_ANTIALIAS", Interpolation::kBilinearNoAntialias,
             "torch interpolate(bilinear, antialias=False), OpenCV INTER_LINEAR: triangle, support 1 at every scale");
  // An enum.IntEnum made from the C++ values: BatchEngine.wait's status tensor holds them
  // as int32, so they compare equal to ints (a py::enum_ compares only with itself), and
  // no C++ function takes one back.
  py::list statuses;
  for (const auto& [name, value] : {std::pair{"OK", engine::Status::kOk},
                                    std::pair{"DECODE_ERROR", engine::Status::kDecodeError},
                                    std::pair{"NOT_JPEG", engine::Status::kNotJpeg},
                                    std::pair{"READ_ERROR", engine::Status::kReadError},
                                    std::pair{"BAD_GEOMETRY", engine::Status::kBadGeometry}}) {
    statuses.append(py::make_tuple(name, static_cast<int32_t>(value)));
  }
  py::object status = py::module_::import("enum").attr("IntEnum")("Status", statuses);
  status.attr("__module__") = m.attr("__name__");
  status.attr("__doc__") = "Per-sample outcome of a batch (BatchEngine.wait): OK, DECODE_ERROR (corrupt, "
                           "truncated or over the limits), NOT_JPEG (Python's PIL fallback takes it), READ_ERROR, "
                           "BAD_GEOMETRY (the plan gives the image no pixels to sample).";
  m.attr("Status") = status;

  // No py::dynamic_attr: assigning a misspelt field raises AttributeError.
  py::class_<Plan> plan(m, "Plan",
                        "The fused decode + augment plan the engine runs (csrc/augment/plan.h). Built by "
                        "fastload.augment.plan.build_plan; every field is read-write.");
  plan.def(py::init<>());
#define FASTLOAD_BIND_FIELD(name) plan.def_readwrite(#name, &Plan::name);
  FASTLOAD_PLAN_FIELDS(FASTLOAD_BIND_FIELD)
#undef FASTLOAD_BIND_FIELD
  plan.def("has_color", &Plan::has_color,
           "True when the plan has ops of the uint8 stage (ColorJitter, Grayscale, RandomErasing, GaussianBlur, "
           "RandomCrop padding other than zeros, TrivialAugmentWide, RandAugment, AugMix), which only the CPU "
           "engine's fused pass runs.");
  plan.def("quantizes", &Plan::quantizes,
           "True when the plan has uint8-stage steps other than RandomErasing (they work on Pillow's 8-bit "
           "resample).");
  plan.def(
      "validate", [](const Plan& p) { p.validate("Plan.validate"); },
      "Raises ValueError (what is wrong, and the value) for a plan the engine cannot run.");
  plan.def("__repr__", [](py::object self) {
    const Plan& p = self.cast<const Plan&>();
    std::string text = py::str(py::type::of(self).attr("__name__")).cast<std::string>() + "(";
    const char* separator = "";
#define FASTLOAD_REPR_FIELD(name)                                              \
  text += separator + std::string(#name "=") + py::repr(py::cast(p.name)).cast<std::string>(); \
  separator = ", ";
    FASTLOAD_PLAN_FIELDS(FASTLOAD_REPR_FIELD)
#undef FASTLOAD_REPR_FIELD
    return text + ")";
  });
  plan.def("__eq__", [](const Plan& a, const Plan& b) {
    bool same = true;
#define FASTLOAD_EQ_FIELD(name) same = same && a.name == b.name;
    FASTLOAD_PLAN_FIELDS(FASTLOAD_EQ_FIELD)
#undef FASTLOAD_EQ_FIELD
    return same;
  });
  // Pickled by field name, so that a dataset holding a plan can go to worker processes.
  plan.def(py::pickle(
      [](const Plan& p) {
        py::dict state;
#define FASTLOAD_GET_FIELD(name) state[#name] = p.name;
        FASTLOAD_PLAN_FIELDS(FASTLOAD_GET_FIELD)
#undef FASTLOAD_GET_FIELD
        return state;
      },
      [](const py::dict& state) {
        Plan p;
#define FASTLOAD_SET_FIELD(name) p.name = state[#name].cast<decltype(p.name)>();
        FASTLOAD_PLAN_FIELDS(FASTLOAD_SET_FIELD)
#undef FASTLOAD_SET_FIELD
        return p;
      }));

  m.def("region_of", &region_tuple, py::arg("plan"), py::arg("height"), py::arg("width"), py::arg("epoch"),
        py::arg("index"), py::kw_only(), py::arg("vertical") = false,
        "(box, clamp, flip) of one sample under a plan, in full-resolution pixels; vertical=True: (box, clamp, "
        "flip, flip_v), required for a plan with flip_v_p > 0.");
  m.def("dct_scale_denom", &choose_scale_denom, py::arg("crop_height"), py::arg("crop_width"), py::arg("out_height"),
        py::arg("out_width"),
        "The DCT scale denominator (1, 2, 4 or 8) the engine decodes a crop of this many full-resolution pixels "
        "at for this output size.");
  m.def("color_passes", &color_passes, py::arg("plan"), py::arg("samples"), py::arg("epoch"),
        "uint8 [N, K]: the colour records (ColorJitter, grayscale, erasing) of samples [N] under a plan, as the "
        "engine draws them; the batch op's `color`.");
  m.def("regions_of", &regions_tuple, py::arg("plan"), py::arg("sizes"), py::arg("samples"), py::arg("epoch"),
        py::kw_only(), py::arg("vertical") = false,
        "Batched region_of: (boxes float32 [N, 4], clamps float32 [N, 4], flips bool [N]); vertical=True: flips "
        "bool [N, 2] (left-right, top-bottom), required for a plan with flip_v_p > 0.");
  m.def("sampling_views", &sampling_views, py::arg("boxes"), py::arg("clamps"), py::arg("sizes"),
        py::arg("scale_denom") = 1, py::arg("origins") = py::none(),
        "The views (int64 [N, 4]: top, left, height, width) of decoded images (sizes [N, 2]) the taps of "
        "each region (boxes, clamps from regions_of) can reach, and each box relative to its view "
        "(float32 [N, 4]). scale_denom: the images were decoded at DCT scale 1/scale_denom; origins "
        "int64 [N, 2]: where each decoded image starts in the scaled whole image (a window).");
}

// The enums, limits and defaults Python shares with the C++ side, each from its one C++
// definition: fastload/_contract.py and the modules above it read them from here.
void bind_contract(py::module_& m) {
  py::enum_<PaddingMode>(m, "PaddingMode", "RandomCrop's padding_mode as Plan.padding_mode holds it.")
      .value("CONSTANT", kPadConstant, "pad_fill (0 without one)")
      .value("EDGE", kPadEdge, "the nearest edge pixel")
      .value("REFLECT", kPadReflect, "mirrored about the edge pixel")
      .value("SYMMETRIC", kPadSymmetric, "mirrored about the edge");
  py::tuple augment_ops(static_cast<size_t>(augment::autoaugment::kOpCount));
  size_t id = 0;
#define FASTLOAD_BIND_AUGMENT_OP(name) augment_ops[id++] = #name;
  FASTLOAD_AUGMENT_OPS(FASTLOAD_BIND_AUGMENT_OP)
#undef FASTLOAD_BIND_AUGMENT_OP
  m.attr("AUGMENT_OPS") = augment_ops;  // torchvision's op names; the index is the AugmentOp id
  m.attr("DEFAULT_MAX_PIXELS") = kDefaultMaxPixels;
  m.attr("AUTOAUGMENT_MAX_STEPS") = augment::autoaugment::kMaxSteps;
  m.attr("AUTOAUGMENT_POLICY_STEPS") = augment::autoaugment::kPolicySteps;  // ops per AutoAugment sub-policy
  m.attr("AUGMIX_MAX_CHAINS") = augment::augmix::kMaxChains;
  m.attr("AUGMIX_MAX_DEPTH") = augment::augmix::kMaxDepth;
  m.attr("BLUR_MAX_KERNEL") = augment::blur::kMaxKernel;
  m.attr("MAX_RESTART_ROWS") = kMaxRestartRows;
}

void bind_engine(py::module_& m) {
  using engine::BatchEngine;
  py::tuple stages(static_cast<size_t>(engine::kStageCount));
  for (int stage = 0; stage < engine::kStageCount; ++stage) stages[stage] = engine::kStageNames[stage];
  m.attr("engine_stages") = stages;  // the columns of BatchEngine.thread_times, in order
  py::class_<BatchEngine>(m, "BatchEngine", "Thread pool that reads, decodes and augments whole batches.")
      .def(py::init<int>(), py::arg("num_threads"))
      .def_property_readonly("num_threads", &BatchEngine::num_threads)
      .def("set_index", &BatchEngine::set_index, py::arg("path_bytes"), py::arg("path_offsets"),
           py::arg("file_ids"), py::arg("offsets"), py::arg("sizes"))
      .def("set_plan", &BatchEngine::set_plan, py::arg("plan"))
      .def("submit", &BatchEngine::submit, py::arg("samples"), py::arg("out"), py::arg("epoch"),
           py::arg("predecoded") = std::unordered_map<int64_t, at::Tensor>(), py::arg("pin_memory") = false,
           py::arg("views") = std::vector<at::Tensor>(), py::arg("masks") = std::vector<at::Tensor>())
      .def("set_views", &BatchEngine::set_views, py::arg("plans"), py::arg("masks"),
           "Image views 1..K-1 (Plans; view 0 is set_plan's) and masks (MaskSpecs) of every sample.")
      .def("set_mask_index", &BatchEngine::set_mask_index, py::arg("path_bytes"), py::arg("path_offsets"),
           py::arg("file_ids"), py::arg("offsets"), py::arg("sizes"))
      // (status int32 [B], messages); in cpu+gpu mode (out=None) also (packed uint8,
      // shapes int64 [B, 4] = (offset, height, width, row_stride), boxes float32 [B, 4],
      // flips bool [B], or [B, 2] when the plan flips top-bottom): the inputs of
      // crop_resize_flip_normalize_batch. None when `timeout` (seconds, > 0) passes first:
      // the ticket stays valid.
      .def(
          "wait",
          [](BatchEngine& engine, int64_t ticket, double timeout) -> py::object {
            std::optional<engine::BatchResult> result = engine.wait(ticket, timeout);
            if (!result.has_value()) return py::none();
            if (!result->windows.has_value()) return py::make_tuple(result->status, result->messages);
            const engine::PackedWindows& w = *result->windows;
            return py::make_tuple(result->status, result->messages, w.packed, w.shapes, w.boxes, w.flips);
          },
          py::arg("ticket"), py::arg("timeout") = 0.0)
      .def("read_samples", &BatchEngine::read_samples, py::arg("samples"))
      .def("thread_times", &BatchEngine::thread_times,
           "Each engine thread's seconds per stage (float64 [threads, stages], the stages of "
           "fastload._C.engine_stages), samples run (int64 [threads]) and CPU seconds from its own clock "
           "(float64 [threads]) since the engine started.")
      .def_property("timing", &BatchEngine::timing, &BatchEngine::set_timing,
                    "Per-stage timing on (default) or off (no clock read per sample; CPU seconds still kept).")
      .def("close", &BatchEngine::close);
}

}  // namespace
}  // namespace fastload

namespace fastload {
namespace {

// Several outputs per sample (augment/views.h): the mask spec, its sampling modes, the
// views' seeds and a mask's source indexes (what the Python twin and the tests use).
void bind_views(py::module_& m) {
  py::enum_<MaskSampling>(m, "MaskSampling", "How a mask's nearest resize picks source pixels: PIL (Pillow's "
                          "NEAREST, torchvision v1 on PIL masks), TENSOR (torch's interpolate nearest, v2 Mask) or "
                          "CV2 (OpenCV's INTER_NEAREST, albumentations' mask=).")
      .value("PIL", MaskSampling::kPil)
      .value("TENSOR", MaskSampling::kTensor)
      .value("CV2", MaskSampling::kCv2);
  py::class_<MaskSpec>(m, "MaskSpec", "A mask read from a sample's second file, following image view `follows`.")
      .def(py::init([](int follows, int fill, MaskSampling sampling) { return MaskSpec{follows, fill, sampling}; }),
           py::arg("follows") = 0, py::arg("fill") = 0, py::arg("sampling") = MaskSampling::kPil)
      .def_readwrite("follows", &MaskSpec::follows)
      .def_readwrite("fill", &MaskSpec::fill)
      .def_readwrite("sampling", &MaskSpec::sampling)
      .def("__repr__", [](const MaskSpec& spec) {
        return "MaskSpec(follows=" + std::to_string(spec.follows) + ", fill=" + std::to_string(spec.fill) +
               ", sampling=" +
               (spec.sampling == MaskSampling::kPil ? "PIL" : spec.sampling == MaskSampling::kTensor ? "TENSOR" : "CV2") +
               ")";
      });
  m.def("view_seed", [](int64_t seed, int64_t view) { return view_seed(seed, view); }, py::arg("seed"), py::arg("view"),
        "The seed of view `view` of a pipeline seeded `seed` (view 0: `seed` itself).");
  m.def(
      "resized_layout",
      [](const Plan& plan, int height, int width) {
        const ResizedLayout layout = resized_layout(plan, height, width);
        return py::make_tuple(layout.height, layout.width, layout.top, layout.left);
      },
      py::arg("plan"), py::arg("height"), py::arg("width"),
      "Resize + CenterCrop's layout of a height x width image: (resized height, width, crop top, left).");
  m.def(
      "mask_source_indexes",
      [](const Plan& plan, int height, int width, int64_t epoch, int64_t index, MaskSampling sampling) {
        plan.validate("mask_source_indexes");
        const Region region = region_of(plan, height, width, epoch, index);
        MaskAxis rows, cols;
        mask_axes(plan, region, height, width, rows, cols);
        std::vector<int32_t> row_table, col_table;
        mask_axis_table(rows, plan.out_height, sampling, row_table);
        mask_axis_table(cols, plan.out_width, sampling, col_table);
        return py::make_tuple(row_table, col_table);
      },
      py::arg("plan"), py::arg("height"), py::arg("width"), py::arg("epoch"), py::arg("index"), py::arg("sampling"),
      "The source row and column (-1: padding) of each output row and column of a mask following `plan`'s "
      "region of a height x width image: ([out_height], [out_width]) lists.");
}

}  // namespace
}  // namespace fastload

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "fastload native core: ops are in torch.ops.fastload";
  fastload::bind_contract(module);
  fastload::bind_plan(module);
  fastload::bind_engine(module);
  fastload::bind_views(module);
  fastload::engine::install_exit_guard();
  module.def("build_info", &fastload::build_info, "Compile-time configuration: versions, backends, flags.");
}
