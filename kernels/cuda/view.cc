// Joining and indexing along a dim (host side; the gather kernel is in index_kernels.cu).
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  DT_CHECK(!tensors.empty(), "stack: expects a non-empty list of tensors");
  const Tensor& first = tensors[0];
  check_cuda("stack", first, "tensors[0]");
  dim = wrap_dim(dim, first.dim() + 1, "stack");
  for (const Tensor& t : tensors) {
    check_same_device("stack", first, t, "a tensor");
    DT_CHECK(t.sizes() == first.sizes() && t.dtype() == first.dtype(), "stack: tensor ", t.str(),
             " does not match ", first.str(), " (accepted: equal shapes and dtypes)");
  }
  Shape shape = first.sizes();
  shape.insert(shape.begin() + dim, static_cast<int64_t>(tensors.size()));
  DeviceGuard guard(first.device().index);
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  for (size_t k = 0; k < tensors.size(); ++k) {
    Tensor slot = out.select(dim, static_cast<int64_t>(k));
    copy_(slot, tensors[k]);
  }
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  check_cuda(op, x);
  DT_CHECK(x.dim() >= 1, "index_select: input must have at least 1 dim, got ",
           shape_str(x.sizes()));
  dim = wrap_dim(dim, x.dim(), op);
  check_same_device(op, x, index, "index");
  DT_CHECK((index.dtype() == DType::kInt64 || index.dtype() == DType::kInt32) && index.dim() <= 1,
           "index_select: index must be a 0-d or 1-d int64/int32 tensor, got ",
           dtype_name(index.dtype()), " ", shape_str(index.sizes()));
  DeviceGuard guard(x.device().index);
  const Tensor idx = contiguous(index);
  const int64_t count = idx.numel();
  Shape shape = x.sizes();
  shape[dim] = count;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  const Blocked b = blocked(x, dim, dim);
  Tensor record = zeros({2}, DType::kInt64, x.device());
  int64_t* bad = static_cast<int64_t*>(record.data_ptr());
  launch_index_select(b.t.data_ptr(), b.outer, b.n, b.inner, x.element_size(), idx.data_ptr(),
                      idx.dtype(), count, out.data_ptr(), bad, stream_of(x));
  if (b.outer * b.inner == 0)  // nothing to gather: the range check still applies
    launch_check_indices(idx.data_ptr(), idx.dtype(), count, b.n, false, 0, bad, stream_of(x));
  check_launch(op);
  if (count > 0) {
    auto [flag, v] = read_error_record(record);
    DT_CHECK(flag == 0, "index_select: index ", v, " out of range for dim ", dim, " of ",
             shape_str(x.sizes()), " (accepted: 0 to ", x.size(dim) - 1, ")");
  }
  return out;
}

}  // namespace dtensor::kernels::cuda
