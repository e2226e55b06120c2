// 2-d average / max pooling and their backward (host side; kernels in pooling_kernels.cu).
#include "kernels/cpu/pooling.h"

#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

std::vector<int64_t> expand(const char* op, const char* what, const std::vector<int64_t>& v,
                            const std::vector<int64_t>& dflt) {
  if (v.empty()) return dflt;
  if (v.size() == 1) return {v[0], v[0]};
  DT_CHECK(v.size() == 2, op, ": ", what, " has ", v.size(),
           " entries for 2 spatial dims (accepted: 1 or 2 entries)");
  return v;
}

// Checks the input shape (as the CPU kernels do, for 2 spatial dims) and returns the leading
// dims' element count.
int64_t planes_of(const char* op, const Shape& s, int dims) {
  DT_CHECK(dims == 2, op, ": dims = ", dims,
           " is not supported on CUDA (accepted: 2; 1-d and 3-d pooling run on the CPU)");
  DT_CHECK(s.size() == 3 || s.size() == 4, op,
           ": expected a [N, C, *spatial] or [C, *spatial] input with 2 spatial dims, got ",
           shape_str(s));
  DT_CHECK(s[s.size() - 3] > 0 && s[s.size() - 2] > 0 && s[s.size() - 1] > 0, op,
           ": expected non-zero channel and spatial sizes (N may be 0), got ", shape_str(s));
  return numel(Shape(s.begin(), s.end() - 2));
}

Pool2d geometry(const char* op, const Shape& s, int dims, const std::vector<int64_t>& kernel_size,
                const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                const std::vector<int64_t>& dilation, bool ceil_mode) {
  Pool2d p;
  p.planes = planes_of(op, s, dims);
  p.H = s[s.size() - 2];
  p.W = s[s.size() - 1];
  DT_CHECK(!kernel_size.empty(), op, ": kernel_size is empty (accepted: 1 or 2 entries)");
  const std::vector<int64_t> k = expand(op, "kernel_size", kernel_size, {});
  const std::vector<int64_t> st = expand(op, "stride", stride, k);
  const std::vector<int64_t> pd = expand(op, "padding", padding, {0, 0});
  const std::vector<int64_t> dl = expand(op, "dilation", dilation, {1, 1});
  // The CPU kernels' parameter checks and output sizes.
  const std::vector<int64_t> out = kernels::pool_output_size({p.H, p.W}, k, st, pd, dl, ceil_mode);
  for (int i = 0; i < 2; ++i)
    DT_CHECK(out[i] >= 1, op, ": spatial dim ", i, " of size ", i == 0 ? p.H : p.W,
             " gives output size ", out[i], " (kernel ", k[i], ", stride ", st[i], ", padding ",
             pd[i], ", dilation ", dl[i], "): output size is too small");
  p.OH = out[0], p.OW = out[1];
  p.kH = k[0], p.kW = k[1], p.sH = st[0], p.sW = st[1];
  p.pH = pd[0], p.pW = pd[1], p.dH = dl[0], p.dW = dl[1];
  return p;
}

Shape output_shape(const Shape& s, const Pool2d& p) {
  Shape o(s.begin(), s.end() - 2);
  o.push_back(p.OH);
  o.push_back(p.OW);
  return o;
}

}  // namespace

Tensor avg_pool(const Tensor& x, int dims, std::vector<int64_t> kernel_size,
                std::vector<int64_t> stride, std::vector<int64_t> padding, bool ceil_mode,
                bool count_include_pad, std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool";
  check_cuda(op, x);
  check_floating(op, x);
  Pool2d p = geometry(op, x.sizes(), dims, kernel_size, stride, padding, {}, ceil_mode);
  DT_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
           ": divisor_override must not be 0");
  p.count_include_pad = count_include_pad;
  p.divisor_override = divisor_override.value_or(0);
  DeviceGuard guard(x.device().index);
  const Tensor in = contiguous(x);
  Tensor out = Tensor::empty(output_shape(x.sizes(), p), x.dtype(), x.device());
  launch_avg_pool2d(p, compute_of(x.dtype()), in.data_ptr(), x.dtype(), out.data_ptr(),
                    stream_of(x));
  check_launch(op);
  return out;
}

Tensor avg_pool_backward(const Tensor& grad_out, const Tensor& x, int dims,
                         std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                         std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                         std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool_backward";
  check_cuda(op, grad_out, "grad_out");
  check_same_device(op, grad_out, x, "input");
  check_floating(op, grad_out, "grad_out");
  Pool2d p = geometry(op, x.sizes(), dims, kernel_size, stride, padding, {}, ceil_mode);
  DT_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
           ": divisor_override must not be 0");
  p.count_include_pad = count_include_pad;
  p.divisor_override = divisor_override.value_or(0);
  DT_CHECK(grad_out.sizes() == output_shape(x.sizes(), p), op, ": grad_out ",
           shape_str(grad_out.sizes()), " does not match the output shape ",
           shape_str(output_shape(x.sizes(), p)), " of input ", shape_str(x.sizes()));
  DeviceGuard guard(x.device().index);
  const Tensor g = contiguous(grad_out);
  Tensor out = Tensor::empty(x.sizes(), grad_out.dtype(), x.device());
  launch_avg_pool2d_backward(p, compute_of(grad_out.dtype()), g.data_ptr(), grad_out.dtype(),
                             out.data_ptr(), stream_of(x));
  check_launch(op);
  return out;
}

std::pair<Tensor, Tensor> max_pool_with_indices(const Tensor& x, int dims,
                                                std::vector<int64_t> kernel_size,
                                                std::vector<int64_t> stride,
                                                std::vector<int64_t> padding,
                                                std::vector<int64_t> dilation, bool ceil_mode) {
  const char* op = "max_pool_with_indices";
  check_cuda(op, x);
  check_floating(op, x);
  const Pool2d p = geometry(op, x.sizes(), dims, kernel_size, stride, padding, dilation, ceil_mode);
  DeviceGuard guard(x.device().index);
  const Tensor in = contiguous(x);
  const Shape os = output_shape(x.sizes(), p);
  Tensor out = Tensor::empty(os, x.dtype(), x.device());
  Tensor idx = Tensor::empty(os, DType::kInt64, x.device());
  launch_max_pool2d(p, compute_of(x.dtype()), in.data_ptr(), x.dtype(), out.data_ptr(),
                    static_cast<int64_t*>(idx.data_ptr()), stream_of(x));
  check_launch(op);
  return {out, idx};
}

Tensor max_pool_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape,
                         int dims) {
  const char* op = "max_pool_backward";
  check_cuda(op, grad_out, "grad_out");
  check_same_device(op, grad_out, indices, "indices");
  check_floating(op, grad_out, "grad_out");
  DT_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()));
  const int64_t planes = planes_of(op, input_shape, dims);
  DT_CHECK(grad_out.sizes() == indices.sizes() &&
               grad_out.dim() == static_cast<int64_t>(input_shape.size()) &&
               std::equal(input_shape.begin(), input_shape.end() - 2, grad_out.sizes().begin()),
           op, ": grad_out ", shape_str(grad_out.sizes()), " and indices ",
           shape_str(indices.sizes()), " must share the shape, with the leading dims of input ",
           shape_str(input_shape));
  DeviceGuard guard(grad_out.device().index);
  const Compute c = compute_of(grad_out.dtype());
  const Tensor g = contiguous(grad_out);
  const Tensor ix = contiguous(to(indices, DType::kInt64));
  const int64_t in_plane = input_shape[input_shape.size() - 2] * input_shape.back();
  const int64_t out_plane = planes == 0 ? 0 : g.numel() / planes;
  Tensor acc = zeros(input_shape, dtype_of(c), grad_out.device());
  Tensor record = zeros({2}, DType::kInt64, grad_out.device());
  launch_max_pool_backward(c, g.data_ptr(), grad_out.dtype(),
                           static_cast<const int64_t*>(ix.data_ptr()), planes, in_plane, out_plane,
                           acc.data_ptr(), static_cast<int64_t*>(record.data_ptr()),
                           stream_of(grad_out));
  check_launch(op);
  if (g.numel() > 0) {
    auto [bad, v] = read_error_record(record);
    DT_CHECK(bad == 0, op, ": index ", v, " is outside the input ", shape_str(input_shape));
  }
  return to(acc, grad_out.dtype());
}

}  // namespace dtensor::kernels::cuda
