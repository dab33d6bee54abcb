// fastload::decode_jpeg_cuda: batched nvJPEG decode of whole JPEGs into CUDA tensors.
//
// Registered for the CPU dispatch key: its inputs are CPU bytes (nvJPEG parses them on the
// host); its outputs are uint8 [H, W, channels] tensors on `device`, written on that
// device's current stream. Files over the CPU decoder's limits (max_pixels, progressive
// scan count: jpeg_limit_error) are refused the same way. Samples nvJPEG cannot take (CMYK, Adobe RGB, what the hardware
// decoder rejects, a batch nvJPEG fails on) are decoded by the CPU decoder
// (decode_jpeg_cpu.cpp) and uploaded; the second output says which ones.
//
// Compiles without CUDA and without nvJPEG; the op then raises a message naming the fix.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "check.h"
#include "decode/decode_jpeg.h"

#if defined(FASTLOAD_WITH_CUDA) && defined(FASTLOAD_WITH_NVJPEG)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <nvjpeg.h>

#include <memory>
#endif

namespace fastload {
namespace {

constexpr const char* kOp = "decode_jpeg_cuda";

#if defined(FASTLOAD_WITH_CUDA) && defined(FASTLOAD_WITH_NVJPEG)

const char* status_name(nvjpegStatus_t status) {
  switch (status) {
    case NVJPEG_STATUS_SUCCESS: return "NVJPEG_STATUS_SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG: return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
  }
  return "unknown nvJPEG status";
}

// Statuses that mean "nvJPEG will not decode these bytes" (the CPU decoder then tries,
// and raises if the data really is bad), as opposed to failures of the library or the
// GPU, which are raised.
bool is_rejection(nvjpegStatus_t status) {
  return status == NVJPEG_STATUS_BAD_JPEG || status == NVJPEG_STATUS_JPEG_NOT_SUPPORTED ||
         status == NVJPEG_STATUS_INCOMPLETE_BITSTREAM || status == NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED;
}

#define FASTLOAD_NVJPEG_CHECK(expr)                                                                   \
  do {                                                                                                \
    const nvjpegStatus_t status_ = (expr);                                                            \
    FASTLOAD_CHECK(status_ == NVJPEG_STATUS_SUCCESS, kOp, "expected ", #expr, " to succeed, got ",    \
                   status_name(status_), " (", static_cast<int>(status_), "). Check the GPU and the " \
                   "nvidia-nvjpeg version (python -m fastload.info).");                              \
  } while (0)

struct HandleDeleter {
  void operator()(nvjpegHandle* h) const { nvjpegDestroy(h); }
};
struct StateDeleter {
  void operator()(nvjpegJpegState* s) const { nvjpegJpegStateDestroy(s); }
};
struct StreamDeleter {
  void operator()(nvjpegJpegStream* s) const { nvjpegJpegStreamDestroy(s); }
};

// One nvJPEG handle + batched-decode state + header parser, bound to one device. Not
// thread-safe: each thread gets its own (see decoder_for()).
class NvjpegDecoder {
 public:
  NvjpegDecoder() {
    nvjpegHandle_t handle = nullptr;
    // The hardware decoder (A100, H100, ...) when the GPU has one, else the default
    // (hybrid CPU Huffman + GPU IDCT) backend.
    if (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &handle) ==
        NVJPEG_STATUS_SUCCESS) {
      hardware_ = true;
    } else {
      handle = nullptr;
      FASTLOAD_NVJPEG_CHECK(nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &handle));
    }
    handle_.reset(handle);
    nvjpegJpegState_t state = nullptr;
    FASTLOAD_NVJPEG_CHECK(nvjpegJpegStateCreate(handle_.get(), &state));
    state_.reset(state);
    nvjpegJpegStream_t stream = nullptr;
    FASTLOAD_NVJPEG_CHECK(nvjpegJpegStreamCreate(handle_.get(), &stream));
    parser_.reset(stream);
  }

  // True when nvjpegDecodeBatched can take these bytes, judged from the header only
  // (`info`: libjpeg's reading of it, already checked against the limits).
  bool accepts(const uint8_t* data, size_t size, const JpegInfo& info, int* height, int* width) {
    // nvJPEG assumes YCbCr or gray; CMYK/YCCK and Adobe RGB go through the CPU decoder,
    // which converts them exactly as Pillow does.
    const bool color_ok = (info.components == 3 && info.color_space == 3 /* JCS_YCbCr */) ||
                          (info.components == 1 && info.color_space == 1 /* JCS_GRAYSCALE */);
    if (!color_ok) return false;
    int components = 0;
    nvjpegChromaSubsampling_t subsampling = NVJPEG_CSS_UNKNOWN;
    int widths[NVJPEG_MAX_COMPONENT] = {0};
    int heights[NVJPEG_MAX_COMPONENT] = {0};
    if (nvjpegGetImageInfo(handle_.get(), data, size, &components, &subsampling, widths, heights) !=
            NVJPEG_STATUS_SUCCESS ||
        subsampling == NVJPEG_CSS_UNKNOWN || widths[0] != info.width || heights[0] != info.height) {
      return false;
    }
    if (hardware_) {
      // The hardware decoder takes baseline single-scan files only (no progressive, no
      // 4:1:1 / 4:1:0); nvJPEG says which.
      int unsupported = 1;
      if (nvjpegJpegStreamParseHeader(handle_.get(), data, size, parser_.get()) != NVJPEG_STATUS_SUCCESS ||
          nvjpegDecodeBatchedSupported(handle_.get(), parser_.get(), &unsupported) != NVJPEG_STATUS_SUCCESS ||
          unsupported != 0) {
        return false;
      }
    }
    *height = info.height;
    *width = info.width;
    return true;
  }

  // Decodes the batch into `images` (preallocated) on `stream`. Returns false when
  // nvJPEG rejected the batch (the caller decodes those samples on the CPU); raises on
  // library or GPU failures.
  bool decode_batch(const std::vector<const unsigned char*>& datas, const std::vector<size_t>& sizes,
                    std::vector<nvjpegImage_t>& images, int channels, cudaStream_t stream) {
    const nvjpegOutputFormat_t format = channels == 3 ? NVJPEG_OUTPUT_RGBI : NVJPEG_OUTPUT_Y;
    // Called for every batch: the batch size changes, and it resets a failed batch.
    nvjpegStatus_t status = nvjpegDecodeBatchedInitialize(handle_.get(), state_.get(),
                                                          static_cast<int>(datas.size()), 1, format);
    if (status == NVJPEG_STATUS_SUCCESS) {
      status = nvjpegDecodeBatched(handle_.get(), state_.get(), datas.data(), sizes.data(), images.data(), stream);
    }
    if (status == NVJPEG_STATUS_SUCCESS) return true;
    if (is_rejection(status)) return false;
    FASTLOAD_CHECK(false, kOp, "expected nvjpegDecodeBatched to succeed, got ", status_name(status), " (",
                   static_cast<int>(status), ") for a batch of ", datas.size(),
                   " images. Check the GPU (nvidia-smi) and the nvidia-nvjpeg version.");
    return false;
  }

 private:
  // Destroyed in reverse order: parser and state before the handle they belong to.
  std::unique_ptr<nvjpegHandle, HandleDeleter> handle_;
  std::unique_ptr<nvjpegJpegState, StateDeleter> state_;
  std::unique_ptr<nvjpegJpegStream, StreamDeleter> parser_;
  bool hardware_ = false;
};

// Creating a handle costs milliseconds (the hardware backend much more), far too much
// per batch, so each thread keeps one decoder per device: thread-local, so no lock and
// no state shared between threads. They are destroyed when the thread exits (for the
// main thread, before the CUDA runtime's own exit handlers run).
NvjpegDecoder& decoder_for(int device_index) {
  thread_local std::vector<std::unique_ptr<NvjpegDecoder>> decoders;
  if (static_cast<int>(decoders.size()) <= device_index) decoders.resize(device_index + 1);
  if (!decoders[device_index]) decoders[device_index] = std::make_unique<NvjpegDecoder>();
  return *decoders[device_index];
}

at::Tensor decode_on_cpu(const at::Tensor& data, int channels, int64_t max_pixels, size_t index,
                         const c10::Device& device) {
  auto window = std::make_unique<DecodedWindow>();
  try {
    decode_jpeg_window(data.data_ptr<uint8_t>(), static_cast<size_t>(data.numel()), 0, 0, 0, 0, 1, channels,
                       max_pixels, *window);
  } catch (const DecodeError& e) {
    FASTLOAD_CHECK(false, kOp, "sample ", index, ": ", e.what(), ". Fix or remove the file.");
  }
  const int64_t h = window->height, w = window->width, c = window->channels;
  DecodedWindow* raw = window.release();
  at::Tensor pixels = at::from_blob(
      raw->pixels.data(), {h, w, c}, [raw](void*) { delete raw; }, at::TensorOptions().dtype(at::kByte));
  // A pageable host->device copy on the current stream: it returns once the bytes are
  // staged, so `pixels` may be freed right after.
  return pixels.to(device);
}

std::tuple<std::vector<at::Tensor>, at::Tensor> decode_with_nvjpeg(at::TensorList datas, int channels,
                                                                   c10::Device device, int64_t max_pixels) {
  const size_t n = datas.size();
  const c10::cuda::CUDAGuard guard(device);
  const int device_index = c10::cuda::current_device();
  const c10::Device target(c10::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(device_index).stream();
  NvjpegDecoder& decoder = decoder_for(device_index);

  std::vector<at::Tensor> outputs(n);
  at::Tensor on_cpu = at::zeros({static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kBool));
  bool* fallback = on_cpu.data_ptr<bool>();

  std::vector<size_t> gpu_index;
  std::vector<const unsigned char*> gpu_data;
  std::vector<size_t> gpu_size;
  std::vector<nvjpegImage_t> gpu_images;
  for (size_t i = 0; i < n; ++i) {
    const auto* bytes = datas[i].data_ptr<uint8_t>();
    const auto size = static_cast<size_t>(datas[i].numel());
    int height = 0, width = 0;
    JpegInfo info;
    bool parsed = false;
    try {
      info = read_jpeg_info(bytes, size);  // libjpeg: also validates the header
      parsed = true;
    } catch (const DecodeError&) {
      // The CPU decoder raises the precise error.
    }
    if (parsed) {
      // The CPU decoder's limits, for nvJPEG too (its default backend decodes progressive
      // files): refused here, before any GPU work of this call is queued.
      const std::string over_limit = jpeg_limit_error(bytes, size, info, max_pixels);
      FASTLOAD_CHECK(over_limit.empty(), kOp, "sample ", i, ": ", over_limit, ".");
    }
    if (!parsed || !decoder.accepts(bytes, size, info, &height, &width)) {
      fallback[i] = true;
      continue;
    }
    outputs[i] = at::empty({height, width, channels}, at::TensorOptions().dtype(at::kByte).device(target));
    nvjpegImage_t image{};
    image.channel[0] = outputs[i].data_ptr<uint8_t>();
    image.pitch[0] = static_cast<size_t>(width) * channels;  // interleaved: one plane
    gpu_index.push_back(i);
    gpu_data.push_back(bytes);
    gpu_size.push_back(size);
    gpu_images.push_back(image);
  }
  if (!gpu_index.empty() && !decoder.decode_batch(gpu_data, gpu_size, gpu_images, channels, stream)) {
    // nvJPEG does not say which sample it rejected: the CPU decodes the whole batch.
    for (size_t i : gpu_index) fallback[i] = true;
  }
  try {
    for (size_t i = 0; i < n; ++i) {
      if (fallback[i]) outputs[i] = decode_on_cpu(datas[i], channels, max_pixels, i, target);
    }
  } catch (...) {
    // The GPU decode of the others may still be running into nvJPEG's staging buffers,
    // which the next call reuses: let it finish before the error leaves.
    cudaStreamSynchronize(stream);
    throw;
  }
  // nvJPEG reuses its pinned staging buffers on the next call with this state: wait for
  // this batch on our stream only (no device-wide synchronisation).
  const cudaError_t error = cudaStreamSynchronize(stream);
  FASTLOAD_CHECK(error == cudaSuccess, kOp, "expected the decode to finish, got CUDA error ",
                 cudaGetErrorString(error), ". The GPU state may be corrupt; restart the process.");
  return {std::move(outputs), on_cpu};
}

#endif  // FASTLOAD_WITH_CUDA && FASTLOAD_WITH_NVJPEG

std::tuple<std::vector<at::Tensor>, at::Tensor> decode_jpeg_cuda_op(at::TensorList datas, int64_t channels,
                                                                    c10::Device device, int64_t max_pixels) {
  FASTLOAD_CHECK_VALUE(channels == 1 || channels == 3, kOp, "expected channels 1 (luma) or 3 (RGB), got ",
                       channels, ".");
  FASTLOAD_CHECK_VALUE(device.is_cuda(), kOp, "expected a CUDA device, got ", device,
                       ". Use decode_jpeg for CPU decoding.");
  for (size_t i = 0; i < datas.size(); ++i) {
    const at::Tensor& data = datas[i];
    FASTLOAD_CHECK(data.device().is_cpu() && data.scalar_type() == at::kByte && data.dim() == 1 &&
                       data.is_contiguous(),
                   kOp, "expected sample ", i, " as contiguous 1-D uint8 bytes on the CPU, got ",
                   data.scalar_type(), " ", data.sizes(), " on ", data.device(),
                   ". Pass torch.frombuffer(bytearray(file_bytes), dtype=torch.uint8).");
    FASTLOAD_CHECK(data.numel() > 0, kOp, "expected a JPEG, got 0 bytes (sample ", i,
                   "). The file is empty: re-create or remove it.");
  }
#if defined(FASTLOAD_WITH_CUDA) && defined(FASTLOAD_WITH_NVJPEG)
  return decode_with_nvjpeg(datas, static_cast<int>(channels), device, max_pixels);
#else
  FASTLOAD_CHECK(false, kOp, "built without nvJPEG; pip install nvidia-nvjpeg and rebuild (make build)");
  return {};
#endif
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) { m.impl("decode_jpeg_cuda", &decode_jpeg_cuda_op); }

}  // namespace fastload
