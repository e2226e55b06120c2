#include "kernels/cpu/masked.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dtensor/core/error.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

// Per element of the global shape: its rank among the mask's true elements (row-major), -1 where
// the mask is false.
std::vector<int64_t> true_ranks(const char* op, const Tensor& mask, const Shape& shape, int64_t* count) {
  DT_CHECK(mask.dtype() == DType::kBool, op, ": mask is ", dtype_name(mask.dtype()), "; accepted: bool");
  const Tensor m = mask.expand(shape).contiguous();
  const bool* mp = m.data<bool>();
  std::vector<int64_t> rank(static_cast<size_t>(m.numel()), -1);
  int64_t k = 0;
  for (size_t i = 0; i < rank.size(); ++i)
    if (mp[i]) rank[i] = k++;
  *count = k;
  return rank;
}

// Calls f(local flat index, global flat index) for every element of a block of `local` sizes at
// `offset` within `global` (row-major both).
template <typename F>
void each_in_block(const Shape& local, const Shape& offset, const Shape& global, F&& f) {
  const int64_t n = numel(local);
  const size_t r = local.size();
  const Shape gstride = contiguous_strides(global);
  Shape idx(r, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t g = 0;
    for (size_t d = 0; d < r; ++d) g += (idx[d] + offset[d]) * gstride[d];
    f(i, g);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

int64_t masked_count(const char* op, const Tensor& mask, const Shape& shape) {
  int64_t count = 0;
  true_ranks(op, mask, shape, &count);
  return count;
}

Tensor masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& source, const Shape& global_shape,
                      const Shape& offset) {
  DT_KERNEL_HOST_ONLY(masked_scatter, self, mask, source, global_shape, offset);
  DT_CHECK(source.dtype() == self.dtype(), "masked_scatter: source is ", dtype_name(source.dtype()), ", self ",
           dtype_name(self.dtype()), "; accepted: source of self's dtype");
  DT_CHECK(self.dim() == static_cast<int64_t>(global_shape.size()) && offset.size() == global_shape.size(),
           "masked_scatter: block ", shape_str(self.sizes()), " at ", shape_str(offset), " of ", shape_str(global_shape),
           "; accepted: a block of the output's rank");
  int64_t count = 0;
  const std::vector<int64_t> rank = true_ranks("masked_scatter", mask, global_shape, &count);
  DT_CHECK(count <= source.numel(), "masked_scatter: the mask has ", count, " true elements, source ",
           shape_str(source.sizes()), " has ", source.numel(), "; accepted: at least as many source elements");
  Tensor out = self.contiguous().clone();
  const Tensor src = source.contiguous();
  const size_t size = out.element_size();
  char* op = static_cast<char*>(out.data_ptr());
  const char* sp = static_cast<const char*>(src.data_ptr());
  each_in_block(out.sizes(), offset, global_shape, [&](int64_t i, int64_t g) {
    if (rank[g] >= 0) std::memcpy(op + i * size, sp + rank[g] * size, size);
  });
  return out;
}

Tensor masked_scatter_source_grad(const Tensor& grad, const Tensor& mask, int64_t source_numel,
                                  const Shape& global_shape, const Shape& offset) {
  DT_KERNEL_HOST_ONLY(masked_scatter_source_grad, grad, mask, source_numel, global_shape, offset);
  DT_CHECK(grad.dim() == static_cast<int64_t>(global_shape.size()) && offset.size() == global_shape.size(),
           "masked_scatter_backward: block ", shape_str(grad.sizes()), " at ", shape_str(offset), " of ",
           shape_str(global_shape), "; accepted: a block of grad_output's rank");
  int64_t count = 0;
  const std::vector<int64_t> rank = true_ranks("masked_scatter_backward", mask, global_shape, &count);
  DT_CHECK(count <= source_numel, "masked_scatter_backward: the mask has ", count, " true elements, sizes have ",
           source_numel, "; accepted: at least as many");
  Tensor out = Tensor::zeros({source_numel}, grad.dtype());
  const Tensor g = grad.contiguous();
  const size_t size = out.element_size();
  char* op = static_cast<char*>(out.data_ptr());
  const char* gp = static_cast<const char*>(g.data_ptr());
  each_in_block(g.sizes(), offset, global_shape, [&](int64_t i, int64_t gi) {
    if (rank[gi] >= 0) std::memcpy(op + rank[gi] * size, gp + i * size, size);
  });
  return out;
}

}  // namespace dtensor::kernels
