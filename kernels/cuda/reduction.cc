// Reductions over dims (host side; kernels in reduction_kernels.cu).
#include <algorithm>
#include <numeric>

#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

// Which dims are reduced (empty list: all); throws on a repeated dim.
std::vector<bool> reduction_mask(const char* op, const Tensor& x,
                                 const std::vector<int64_t>& dims) {
  const int64_t nd = x.dim();
  std::vector<bool> mask(nd, dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, nd, op);
    if (nd == 0) continue;
    DT_CHECK(!mask[w], op, ": dim ", w, " appears more than once in the dims of a ",
             shape_str(x.sizes()), " tensor (accepted: distinct dims)");
    mask[w] = true;
  }
  return mask;
}

Tensor reduce(const char* op, ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims,
              bool keepdim, DType out_dtype, Compute c, double correction = 0) {
  const std::vector<bool> mask = reduction_mask(op, x, dims);
  Shape out_shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[d])
      out_shape.push_back(x.size(d));
    else if (keepdim)
      out_shape.push_back(1);
  }
  DeviceGuard guard(x.device().index);
  Tensor out = Tensor::empty(out_shape, out_dtype, x.device());
  if (out.numel() == 0) return out;

  // Reduced dims that form one block [d0, d1] of a contiguous tensor reduce in place; otherwise
  // the kept dims are moved first and the tensor copied.
  int64_t d0 = -1, d1 = -1;
  bool block = true;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[d]) continue;
    if (d0 < 0)
      d0 = d;
    else if (d != d1 + 1)
      block = false;
    d1 = d;
  }
  Blocked b;
  if (x.dim() == 0 || d0 < 0) {
    b = blocked(x, 0, -1);  // nothing reduced: n = 1
  } else if (block) {
    b = blocked(x, d0, d1);
  } else {
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!mask[d]) perm.push_back(d);
    const int64_t kept = static_cast<int64_t>(perm.size());
    for (int64_t d = 0; d < x.dim(); ++d)
      if (mask[d]) perm.push_back(d);
    b = blocked(x.permute(perm), kept, x.dim() - 1);
  }
  const bool two_pass =
      kind == ReduceKind::kVar || kind == ReduceKind::kStd || kind == ReduceKind::kLogSumExp;
  if (two_pass) {
    Tensor ws = workspace(reduce_two_pass_workspace_bytes(c, b.outer, b.n, b.inner), x.device());
    launch_reduce_two_pass(kind, c, b.t.data_ptr(), x.dtype(), out.data_ptr(), out_dtype, b.outer,
                           b.n, b.inner, correction, ws.data_ptr(), stream_of(x));
  } else {
    Tensor ws = workspace(reduce_workspace_bytes(c, b.outer, b.n, b.inner, false), x.device());
    launch_reduce(kind, c, b.t.data_ptr(), x.dtype(), out.data_ptr(), out_dtype, b.outer, b.n,
                  b.inner, ws.numel() > 0 ? ws.data_ptr() : nullptr, stream_of(x));
  }
  check_launch(op);
  return out;
}

void check_floating_input(const char* op, const Tensor& x, const char* hint = "") {
  DT_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", dtype_name(x.dtype()),
           " ", shape_str(x.sizes()), " (accepted: float32, float64, bfloat16, float16", hint, ")");
}

Tensor extremum(const char* op, ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims,
                bool keepdim) {
  check_cuda(op, x);
  const std::vector<bool> mask = reduction_mask(op, x, dims);
  for (int64_t d = 0; d < x.dim(); ++d)
    DT_CHECK(!mask[d] || x.size(d) > 0, op, ": cannot reduce dim ", d, " of size 0 in ",
             shape_str(x.sizes()), " (accepted: reduced dims of non-zero size)");
  return reduce(op, kind, x, dims, keepdim, x.dtype(), compute_of(x.dtype()));
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_cuda("sum", x);
  const DType out = is_floating(x.dtype()) ? x.dtype() : DType::kInt64;
  return reduce("sum", ReduceKind::kSum, x, dims, keepdim, out, compute_of(out));
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_cuda("mean", x);
  check_floating_input("mean", x, "; convert integer tensors first");
  return reduce("mean", ReduceKind::kMean, x, dims, keepdim, x.dtype(), compute_of(x.dtype()));
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("amax", ReduceKind::kMax, x, dims, keepdim);
}

Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("amin", ReduceKind::kMin, x, dims, keepdim);
}

Tensor prod(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_cuda("prod", x);
  const DType out = is_floating(x.dtype()) ? x.dtype() : DType::kInt64;
  return reduce("prod", ReduceKind::kProd, x, dims, keepdim, out, compute_of(out));
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  check_cuda("var", x);
  check_floating_input("var", x);
  return reduce("var", ReduceKind::kVar, x, dims, keepdim, x.dtype(), compute_of(x.dtype()),
                correction);
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  check_cuda("std", x);
  check_floating_input("std", x);
  return reduce("std", ReduceKind::kStd, x, dims, keepdim, x.dtype(), compute_of(x.dtype()),
                correction);
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_cuda("logsumexp", x);
  const DType out = is_floating(x.dtype()) ? x.dtype() : DType::kFloat32;
  return reduce("logsumexp", ReduceKind::kLogSumExp, x, dims, keepdim, out, compute_of(out));
}

}  // namespace dtensor::kernels::cuda
