// CPU kernels of the random-parameter ops (params.h holds the math). Python uses them
// for the generic path and for tests, so both paths draw identical parameters.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "augment/params.h"
#include "check.h"

namespace fastload {
namespace {

void check_indices(const at::Tensor& indices, const char* op) {
  FASTLOAD_CHECK_VALUE(indices.dim() == 1 && indices.scalar_type() == at::kLong, op,
                       "expected indices as a 1-D int64 tensor, got ", indices.dim(), "-D ",
                       indices.scalar_type(), ".");
}

at::Tensor random_resized_crop_params_cpu(const at::Tensor& sizes, const at::Tensor& indices,
                                          int64_t seed, int64_t epoch, at::ArrayRef<double> scale,
                                          at::ArrayRef<double> ratio) {
  const char* op = "random_resized_crop_params";
  check_indices(indices, op);
  FASTLOAD_CHECK_VALUE(sizes.dim() == 2 && sizes.size(1) == 2 && sizes.size(0) == indices.size(0),
                       op, "expected sizes of shape [", indices.size(0), ", 2] (height, width), got ",
                       sizes.sizes(), ".");
  FASTLOAD_CHECK_VALUE(scale.size() == 2 && ratio.size() == 2 && scale[0] <= scale[1] &&
                           ratio[0] <= ratio[1] && ratio[0] > 0,
                       op, "expected scale and ratio as (min, max) with min <= max, got scale=",
                       scale, ", ratio=", ratio, ".");
  const auto sizes_long = sizes.to(at::kLong).contiguous();
  const auto indices_c = indices.contiguous();
  auto boxes = at::empty({indices.size(0), 4}, indices.options());
  const int64_t* size_data = sizes_long.data_ptr<int64_t>();
  const int64_t* index_data = indices_c.data_ptr<int64_t>();
  int64_t* box_data = boxes.data_ptr<int64_t>();
  for (int64_t i = 0; i < indices.size(0); ++i) {
    const int height = static_cast<int>(size_data[2 * i]);
    const int width = static_cast<int>(size_data[2 * i + 1]);
    FASTLOAD_CHECK_VALUE(height > 0 && width > 0, op, "expected positive image sizes, got ",
                         height, "x", width, " for sample ", index_data[i], ".");
    SampleRng rng(seed, epoch, index_data[i], ParamStream::kCrop);
    const CropBox box = random_resized_crop_box(height, width, scale[0], scale[1], ratio[0], ratio[1], rng);
    box_data[4 * i + 0] = box.top;
    box_data[4 * i + 1] = box.left;
    box_data[4 * i + 2] = box.height;
    box_data[4 * i + 3] = box.width;
  }
  return boxes;
}

at::Tensor random_flip_params_cpu(const at::Tensor& indices, int64_t seed, int64_t epoch, double p) {
  check_indices(indices, "random_flip_params");
  const auto indices_c = indices.contiguous();
  auto flips = at::empty({indices.size(0)}, indices.options().dtype(at::kBool));
  const int64_t* index_data = indices_c.data_ptr<int64_t>();
  bool* flip_data = flips.data_ptr<bool>();
  for (int64_t i = 0; i < indices.size(0); ++i) {
    SampleRng rng(seed, epoch, index_data[i], ParamStream::kFlip);
    flip_data[i] = random_flip(p, rng);
  }
  return flips;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastload, CPU, m) {
  m.impl("random_resized_crop_params", &random_resized_crop_params_cpu);
  m.impl("random_flip_params", &random_flip_params_cpu);
}

}  // namespace fastload
