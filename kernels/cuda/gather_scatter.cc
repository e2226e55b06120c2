// gather and scatter_add along a dim (host side; kernels in index_kernels.cu). Argument shapes,
// dtypes and dim were checked by the CPU kernels before they sent the call here
// (kernels/cpu/gather_scatter.cc); the index values are checked by the kernels.
#include <algorithm>

#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

// Sizes with a 0-d tensor seen as 1-d (the CPU kernel takes a 0-d self with a 0-d or 1-element index).
Shape as_1d(const Tensor& t) { return t.dim() == 0 ? Shape{t.numel()} : t.sizes(); }

void row_major(const Shape& sizes, int64_t* strides) {
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= sizes[d];
  }
}

IndexAlong along(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor* src,
                 int64_t offset, int64_t full) {
  const Shape ss = as_1d(self), is = as_1d(index);
  const int64_t rank = static_cast<int64_t>(ss.size());
  DT_CHECK(rank <= kMaxDims, op, ": self ", shape_str(self.sizes()), " has ", rank,
           " dims (accepted on CUDA: at most ", kMaxDims, ")");
  IndexAlong g;
  g.rank = static_cast<int>(rank);
  g.dim = self.dim() == 0 ? 0 : static_cast<int>(dim);
  for (int64_t d = 0; d < rank; ++d) g.index_sizes[d] = is[d];
  row_major(ss, g.self_strides);
  if (src != nullptr) row_major(as_1d(*src), g.src_strides);
  g.block = ss[g.dim];
  g.offset = offset;
  g.full = full;
  return g;
}

void check_indices(const char* op, const Tensor& record, int64_t full) {
  const auto [bad, v] = read_error_record(record);
  DT_CHECK(bad == 0, op, ": index ", v, " is out of range for a dim of size ", full, " (accepted: indices in [0, ",
           full, "))");
}

}  // namespace

Tensor gather(const Tensor& self, int64_t dim, const Tensor& index, int64_t offset, int64_t full) {
  const char* op = "gather";
  check_cuda(op, self, "self");
  check_same_device(op, self, index, "index");
  DeviceGuard guard(self.device().index);
  dim = self.dim() == 0 ? 0 : wrap_dim(dim, self.dim(), op);
  if (full < 0) full = self.dim() == 0 ? 1 : self.size(dim);
  const IndexAlong g = along(op, self, dim, index, nullptr, offset, full);
  const Tensor s = contiguous(self), i = contiguous(to(index, DType::kInt64));
  Tensor out = zeros(index.sizes(), self.dtype(), self.device());
  Tensor record = zeros({2}, DType::kInt64, self.device());
  launch_gather(g, s.data_ptr(), s.element_size(), static_cast<const int64_t*>(i.data_ptr()), out.data_ptr(),
                static_cast<int64_t*>(record.data_ptr()), stream_of(self));
  check_launch(op);
  check_indices(op, record, full);
  return out;
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, int64_t offset,
                   int64_t full) {
  const char* op = "scatter_add";
  check_cuda(op, self, "self");
  check_same_device(op, self, index, "index");
  check_same_device(op, self, src, "src");
  DeviceGuard guard(self.device().index);
  dim = self.dim() == 0 ? 0 : wrap_dim(dim, self.dim(), op);
  if (full < 0) full = self.dim() == 0 ? 1 : self.size(dim);
  const IndexAlong g = along(op, self, dim, index, &src, offset, full);
  const Compute c = compute_of(self.dtype());
  Tensor acc = contiguous(to(self, dtype_of(c))).clone();  // never self's own memory
  const Tensor i = contiguous(to(index, DType::kInt64)), r = contiguous(to(src, dtype_of(c)));
  Tensor record = zeros({2}, DType::kInt64, self.device());
  launch_scatter_add(g, c, acc.data_ptr(), static_cast<const int64_t*>(i.data_ptr()), r.data_ptr(),
                     static_cast<int64_t*>(record.data_ptr()), stream_of(self));
  check_launch(op);
  check_indices(op, record, full);
  return contiguous(to(acc, self.dtype()));
}

}  // namespace dtensor::kernels::cuda
