#include "kernels/cuda/common.h"

#include <algorithm>

#include "dtensor/core/cuda/cuda_storage.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda::detail {

void check_cuda(const char* op, const Tensor& t, const char* what) {
  DT_CHECK(t.defined(), op, ": ", what, " is undefined");
  DT_CHECK(t.device().is_cuda(), op, ": ", what, " ", t.str(),
           " is not on a CUDA device (accepted: CUDA tensors; see dtensor::to_device)");
  ::dtensor::cuda::check_device(t.device(), op);
  ::dtensor::cuda::register_storage_allocator();
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b, const char* what) {
  check_cuda(op, b, what);
  DT_CHECK(a.device() == b.device(), op, ": ", what, " is on ", b.device().str(),
           " but the input is on ", a.device().str(), " (accepted: one device)");
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  DT_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating, got ", dtype_name(t.dtype()),
           " ", shape_str(t.sizes()), " (accepted: float32, float64, bfloat16, float16)");
}

void check_launch(const char* op) { DT_CUDA_CHECK(cudaGetLastError(), op, ": kernel launch"); }

Compute compute_of(DType t) {
  if (t == DType::kFloat64) return Compute::kDouble;
  return is_floating(t) ? Compute::kFloat : Compute::kInt64;
}

DType dtype_of(Compute c) {
  switch (c) {
    case Compute::kFloat:
      return DType::kFloat32;
    case Compute::kDouble:
      return DType::kFloat64;
    case Compute::kInt64:
      return DType::kInt64;
  }
  return DType::kFloat32;
}

Tensor workspace(size_t bytes, Device device) {
  return Tensor::empty({static_cast<int64_t>(bytes)}, DType::kBool, device);
}

Shape broadcast_op(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Align from the right; missing leading dims count as 1.
    const int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    DT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " do not broadcast (dim ", i, " of the result: ", da, " vs ", db,
             "; accepted: equal sizes or 1)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Operand operand(const Tensor& t, const Shape& shape) {
  Operand o;
  Tensor e = t.expand(shape);
  o.data = e.numel() > 0 ? e.data_ptr() : nullptr;
  o.dtype = t.dtype();
  for (size_t d = 0; d < shape.size(); ++d) o.strides[d] = e.strides()[d];
  return o;
}

Operand scalar_operand(double d, int64_t i, DType dtype) {
  Operand o;
  o.data = nullptr;
  o.dtype = dtype;
  o.scalar_d = d;
  o.scalar_i = i;
  return o;
}

LoopShape loop_shape(const char* op, const Shape& shape,
                     const std::vector<const Tensor*>& tensors) {
  DT_CHECK(static_cast<int>(shape.size()) <= kMaxDims, op, ": ", shape.size(),
           "-d tensors are not supported on CUDA (accepted: at most ", kMaxDims, " dims)");
  LoopShape l;
  l.ndim = static_cast<int>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) l.sizes[d] = shape[d];
  l.numel = numel(shape);
  l.contiguous = true;
  for (const Tensor* t : tensors)
    l.contiguous = l.contiguous && t->sizes() == shape && t->is_contiguous();
  return l;
}

Blocked blocked(const Tensor& x, int64_t d0, int64_t d1) {
  Blocked b;
  b.t = contiguous(x);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < d0)
      b.outer *= x.size(d);
    else if (d <= d1)
      b.n *= x.size(d);
    else
      b.inner *= x.size(d);
  }
  return b;
}

std::pair<int64_t, int64_t> read_error_record(const Tensor& record) {
  int64_t host[2] = {0, 0};
  ::dtensor::cuda::DeviceGuard guard(record.device().index);
  cudaStream_t s = stream_of(record);
  DT_CUDA_CHECK(cudaMemcpyAsync(host, record.data_ptr(), sizeof(host), cudaMemcpyDeviceToHost, s),
                "reading a kernel's error record");
  DT_CUDA_CHECK(cudaStreamSynchronize(s), "reading a kernel's error record");
  return {host[0], host[1]};
}

}  // namespace dtensor::kernels::cuda::detail
