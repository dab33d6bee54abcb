// fastload._C: every operator schema lives here, in one place.
//
// Backend kernels register with TORCH_LIBRARY_IMPL in their own files
// (decode/, augment/); fake (meta) kernels live in fastload/_meta.py. The batch
// engine (engine/batch.cpp) is a stateful thread pool, not a tensor op, so it is
// exposed as a pybind11 class whose blocking calls release the GIL.
#include <torch/extension.h>

#include "engine/batch.h"

TORCH_LIBRARY(fastload, m) {
  // ---- decode (csrc/decode) -------------------------------------------------
  // Header only: [height, width, components, jpeg_color_space, progressive].
  m.def("jpeg_header(Tensor data) -> int[]");
  // Decodes rows/columns window=[top, left, height, width] (full-resolution pixels;
  // [] = whole image) at 1/scale_denom (1, 2, 4 or 8) to uint8 HWC with `channels`
  // (1 or 3) channels. Returns exactly the window, scaled: ceil-rounded edges.
  m.def(
      "decode_jpeg(Tensor data, int[] window=[], int scale_denom=1, int channels=3, "
      "int max_pixels=178956970) -> Tensor");
  // nvJPEG batched decode of whole images (CPU bytes in): uint8 [H, W, channels] CUDA
  // tensors on the current stream, and a bool [N] CPU tensor: True where nvJPEG could not
  // take the sample and the CPU decoder did it (uploaded). Same limits as decode_jpeg.
  m.def(
      "decode_jpeg_cuda(Tensor[] datas, int channels=3, Device device=\"cuda\", "
      "int max_pixels=178956970) -> (Tensor[], Tensor)");

  // ---- augment (csrc/augment) -----------------------------------------------
  // image: uint8 HWC (channel and column strides packed, any row stride).
  // box: [top, left, height, width] floats in image pixels. Output pixel centres map
  // linearly onto the box; antialiased bilinear taps clamp to the image (not the box);
  // centres outside the image read 0 (padding). value = (v * scale - mean[c]) / std[c],
  // v in [0, 255]; then cast (uint8: round + saturate). Returns [C, size[0], size[1]]
  // (channels_last memory when channels_last).
  m.def(
      "crop_resize_flip_normalize(Tensor image, float[] box, int[] size, bool flip, "
      "float scale, float[] mean, float[] std, ScalarType dtype, bool channels_last) -> Tensor");
  // Batched, in place: images is packed uint8 (1-D); shapes int64 [N, 4] =
  // (offset, height, width, row_stride) of each HWC image in it; boxes float32 [N, 4];
  // flips bool [N]; mean/std float32 [C]; out [N, C, H, W] of any strides.
  m.def(
      "crop_resize_flip_normalize_batch(Tensor images, Tensor shapes, Tensor boxes, "
      "Tensor flips, float scale, Tensor mean, Tensor std, Tensor(a!) out) -> ()");

  // ---- random parameters (csrc/augment/params.h) ------------------------------
  // RandomResizedCrop boxes [N, 4] (top, left, height, width) for image sizes [N, 2]
  // (height, width) as a pure function of (seed, epoch, index).
  m.def(
      "random_resized_crop_params(Tensor sizes, Tensor indices, int seed, int epoch, "
      "float[] scale, float[] ratio) -> Tensor");
  // Horizontal flip draws [N] bool with probability p, pure function of (seed, epoch, index).
  m.def("random_flip_params(Tensor indices, int seed, int epoch, float p) -> Tensor");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "fastload native core: ops are in torch.ops.fastload";
  fastload::engine::bind(module);
  module.def("build_info", &fastload::engine::build_info,
             "Compile-time configuration: versions, backends, flags.");
}
