// The pointwise rows on CUDA tensors (host side; kernels in pointwise_rows_kernels.cu): the same
// dtype rules and errors as the CPU kernels (kernels/cpu/pointwise_rows.h).
#include "dtensor/core/cuda/cuda_storage.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT: the launchers and helpers of this library
using ::dtensor::cuda::DeviceGuard;

Tensor pointwise_unary_row(UnaryRow row, const Tensor& x) {
  const UnaryRowInfo& info = row_info(row);
  check_cuda(info.name, x, "self");
  const DType out_dtype = kernels::row_dtype(row, x.dtype(), x.sizes());
  const Compute c = compute_of(info.dtypes == RowDTypes::kToBool ? x.dtype() : out_dtype);
  DeviceGuard guard(x.device().index);
  Tensor out = Tensor::empty(x.sizes(), out_dtype, x.device());
  const LoopShape l = loop_shape(info.name, out.sizes(), {&out, &x});
  launch_unary_row(row, c, l, operand(out, out.sizes()), operand(x, out.sizes()), stream_of(out));
  check_launch(info.name);
  return out;
}

Tensor pointwise_param_row(ParamRow row, const Tensor& x, const RowParams& p) {
  const ParamRowInfo& info = row_info(row);
  check_cuda(info.name, x, "self");
  const DType out_dtype = kernels::row_dtype(row, x.dtype(), x.sizes(), p);
  const Compute c = compute_of(out_dtype);
  DeviceGuard guard(x.device().index);
  Tensor out = Tensor::empty(x.sizes(), out_dtype, x.device());
  const LoopShape l = loop_shape(info.name, out.sizes(), {&out, &x});
  launch_param_row(row, c, l, operand(out, out.sizes()), operand(x, out.sizes()), p, stream_of(out));
  check_launch(info.name);
  return out;
}

Tensor pointwise_binary_row(BinaryRow row, const Tensor& a, const Tensor& b) {
  const BinaryRowInfo& info = row_info(row);
  check_cuda(info.name, a, "self");
  check_same_device(info.name, a, b, "other");
  const Shape shape = broadcast_op(info.name, a.sizes(), b.sizes());
  const DType out_dtype = kernels::row_dtype(row, a.dtype(), a.sizes(), b.dtype(), b.sizes());
  const Compute c = compute_of(info.dtypes == RowDTypes::kToBool ? result_type(a, b) : out_dtype);
  if (info.divides() && c == Compute::kInt64) {
    // An integer divisor of 0 is an error: checked on a host copy (a synchronizing read, as the
    // index checks of this library; integer fmod/remainder are rare on the device).
    const Tensor divisor = b.to(cpu()).to(DType::kInt64).contiguous();
    const int64_t* p = divisor.data<int64_t>();
    for (int64_t i = 0; i < divisor.numel(); ++i)
      DT_CHECK(p[i] != 0, info.name, ": integer division by zero (", dtype_name(a.dtype()), " ",
               shape_str(a.sizes()), " and ", dtype_name(b.dtype()), " ", shape_str(b.sizes()), ")");
  }
  DeviceGuard guard(a.device().index);
  Tensor out = Tensor::empty(shape, out_dtype, a.device());
  const LoopShape l = loop_shape(info.name, shape, {&out, &a, &b});
  launch_binary_row(row, c, l, operand(out, shape), operand(a, shape), operand(b, shape), stream_of(a));
  check_launch(info.name);
  return out;
}

}  // namespace dtensor::kernels::cuda
