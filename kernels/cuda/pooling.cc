// Average / max pooling over 1, 2 or 3 spatial dims and their backward (host side; kernels in
// pooling_kernels.cu). Slabs (a sharded spatial dim after its halo exchange) run on the CPU.
#include "kernels/cpu/pooling.h"

#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

// One value per spatial dim (a single value broadcasts; empty gives dflt).
std::vector<int64_t> expand(const char* op, const char* what, const std::vector<int64_t>& v, int dims,
                            const std::vector<int64_t>& dflt) {
  if (v.empty()) return dflt;
  if (v.size() == 1) return std::vector<int64_t>(dims, v[0]);
  DT_CHECK(static_cast<int>(v.size()) == dims, op, ": ", what, " has ", v.size(), " entries for ", dims,
           " spatial dims (accepted: 1 or ", dims, " entries)");
  return v;
}

// Checks the input shape (as the CPU kernels do) and returns the leading dims' element count.
int64_t planes_of(const char* op, const Shape& s, int dims) {
  DT_CHECK(dims >= 1 && dims <= 3, op, ": dims = ", dims, " (accepted: 1, 2 or 3 spatial dims)");
  const int rank = static_cast<int>(s.size());
  DT_CHECK(rank == dims + 1 || rank == dims + 2, op, ": expected a [N, C, *spatial] or [C, *spatial] input with ",
           dims, " spatial dims, got ", shape_str(s));
  bool nonzero = s[rank - dims - 1] > 0;
  for (int k = 0; k < dims; ++k) nonzero = nonzero && s[rank - dims + k] > 0;
  DT_CHECK(nonzero, op, ": expected non-zero channel and spatial sizes (N may be 0), got ", shape_str(s));
  return numel(Shape(s.begin(), s.end() - dims));
}

// The window geometry over 1, 2 or 3 spatial dims, placed in the kernels' 3 (leading dims of size
// 1 for fewer), after the CPU kernels' checks (kernels/cpu/pooling.h).
Pool2d geometry(const char* op, const Shape& s, int dims, bool is_max,
                const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride,
                const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                bool ceil_mode) {
  Pool2d p;
  p.planes = planes_of(op, s, dims);
  const Shape in(s.end() - dims, s.end());
  DT_CHECK(!kernel_size.empty(), op, ": kernel_size is empty (accepted: 1 or ", dims, " entries)");
  const std::vector<int64_t> k = expand(op, "kernel_size", kernel_size, dims, {});
  const std::vector<int64_t> st = expand(op, "stride", stride, dims, k);
  const std::vector<int64_t> pd = expand(op, "padding", padding, dims, std::vector<int64_t>(dims, 0));
  const std::vector<int64_t> dl = expand(op, "dilation", dilation, dims, std::vector<int64_t>(dims, 1));
  // The CPU kernels' parameter checks and output sizes; 3-d pooling's stricter ones as theirs.
  const std::vector<int64_t> out = kernels::pool_output_size(in, k, st, pd, dl, ceil_mode);
  for (int i = 0; i < dims; ++i) {
    DT_CHECK(dims != 3 || pd[i] <= k[i] / 2, op, ": padding ", pd[i],
             " must be >= 0 and at most half of the kernel size ", k[i], " (accepted: 0 .. ", k[i] / 2, ")");
    DT_CHECK(out[i] >= 1, op, ": spatial dim ", i, " of size ", in[i], " gives output size ", out[i],
             " (kernel ", k[i], ", stride ", st[i], ", padding ", pd[i], ", dilation ", dl[i],
             "): output size is too small");
    DT_CHECK(is_max || dims != 3 || in[i] >= k[i], op, ": spatial dim ", i, " of size ", in[i],
             " is smaller than the kernel size ", k[i], " (avg_pool 3-d needs input >= kernel)");
  }
  // Right-aligned into (D, H, W).
  int64_t* sizes[3] = {&p.D, &p.H, &p.W};
  int64_t* outs[3] = {&p.OD, &p.OH, &p.OW};
  int64_t* ks[3] = {&p.kD, &p.kH, &p.kW};
  int64_t* ss[3] = {&p.sD, &p.sH, &p.sW};
  int64_t* ps[3] = {&p.pD, &p.pH, &p.pW};
  int64_t* ds[3] = {&p.dD, &p.dH, &p.dW};
  for (int i = 0; i < dims; ++i) {
    const int a = 3 - dims + i;
    *sizes[a] = in[i], *outs[a] = out[i], *ks[a] = k[i], *ss[a] = st[i], *ps[a] = pd[i], *ds[a] = dl[i];
  }
  return p;
}

Shape output_shape(const Shape& s, int dims, const Pool2d& p) {
  Shape o(s.begin(), s.end() - dims);
  const int64_t outs[3] = {p.OD, p.OH, p.OW};
  for (int a = 3 - dims; a < 3; ++a) o.push_back(outs[a]);
  return o;
}

}  // namespace

Tensor avg_pool(const Tensor& x, int dims, std::vector<int64_t> kernel_size,
                std::vector<int64_t> stride, std::vector<int64_t> padding, bool ceil_mode,
                bool count_include_pad, std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool";
  check_cuda(op, x);
  check_floating(op, x);
  Pool2d p = geometry(op, x.sizes(), dims, false, kernel_size, stride, padding, {}, ceil_mode);
  DT_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
           ": divisor_override must not be 0");
  p.count_include_pad = count_include_pad;
  p.divisor_override = divisor_override.value_or(0);
  DeviceGuard guard(x.device().index);
  const Tensor in = contiguous(x);
  Tensor out = Tensor::empty(output_shape(x.sizes(), dims, p), x.dtype(), x.device());
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
  Pool2d p = geometry(op, x.sizes(), dims, false, kernel_size, stride, padding, {}, ceil_mode);
  DT_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
           ": divisor_override must not be 0");
  p.count_include_pad = count_include_pad;
  p.divisor_override = divisor_override.value_or(0);
  DT_CHECK(grad_out.sizes() == output_shape(x.sizes(), dims, p), op, ": grad_out ",
           shape_str(grad_out.sizes()), " does not match the output shape ",
           shape_str(output_shape(x.sizes(), dims, p)), " of input ", shape_str(x.sizes()));
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
  const Pool2d p = geometry(op, x.sizes(), dims, true, kernel_size, stride, padding, dilation, ceil_mode);
  DeviceGuard guard(x.device().index);
  const Tensor in = contiguous(x);
  const Shape os = output_shape(x.sizes(), dims, p);
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
               std::equal(input_shape.begin(), input_shape.end() - dims, grad_out.sizes().begin()),
           op, ": grad_out ", shape_str(grad_out.sizes()), " and indices ",
           shape_str(indices.sizes()), " must share the shape, with the leading dims of input ",
           shape_str(input_shape));
  DeviceGuard guard(grad_out.device().index);
  const Compute c = compute_of(grad_out.dtype());
  const Tensor g = contiguous(grad_out);
  const Tensor ix = contiguous(to(indices, DType::kInt64));
  const int64_t in_plane = numel(Shape(input_shape.end() - dims, input_shape.end()));
  const int64_t out_plane = planes == 0 ? 0 : g.numel() / planes;
  Tensor record = zeros({2}, DType::kInt64, grad_out.device());
  int64_t* bad = static_cast<int64_t*>(record.data_ptr());
  const int64_t* ip = static_cast<const int64_t*>(ix.data_ptr());
  // A plane that fits in shared memory accumulates there and is written once, in grad_out's dtype;
  // else a zeroed accumulator of the compute type takes global atomics.
  Tensor out;
  bool written = false;
  if (const int64_t group = max_pool_backward_plane_group(c, planes, in_plane, out_plane); group > 0) {
    out = Tensor::empty(input_shape, grad_out.dtype(), grad_out.device());
    written = launch_max_pool_backward_planes(c, g.data_ptr(), grad_out.dtype(), ip, planes, group, in_plane,
                                              out_plane, out.data_ptr(), bad, stream_of(grad_out));
  }
  if (!written) {
    Tensor acc = zeros(input_shape, dtype_of(c), grad_out.device());
    launch_max_pool_backward(c, g.data_ptr(), grad_out.dtype(), ip, planes, in_plane, out_plane,
                             acc.data_ptr(), bad, stream_of(grad_out));
    out = to(acc, grad_out.dtype());
  }
  check_launch(op);
  if (g.numel() > 0) {
    auto [bad_flag, v] = read_error_record(record);
    DT_CHECK(bad_flag == 0, op, ": index ", v, " is outside the input ", shape_str(input_shape));
  }
  return out;
}

}  // namespace dtensor::kernels::cuda
