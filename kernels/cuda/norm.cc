// Softmax, normalization layers and embedding lookups (host side; kernels in norm_kernels.cu).
#include <algorithm>

#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

Tensor softmax_impl(const char* op, bool log, const Tensor& x, int64_t dim) {
  check_cuda(op, x);
  check_floating(op, x);
  dim = wrap_dim(dim, x.dim(), op);
  DeviceGuard guard(x.device().index);
  Blocked b = x.dim() == 0 ? blocked(x, 0, -1) : blocked(x, dim, dim);
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  launch_softmax(log, compute_of(x.dtype()), b.t.data_ptr(), out.data_ptr(), x.dtype(), b.outer,
                 b.n, b.inner, stream_of(x));
  check_launch(op);
  return out;
}

// x, contiguous (rows of numel(normalized_shape) elements), after the CPU kernels' checks.
Tensor normalized_rows(const char* op, const Tensor& x, const Shape& normalized_shape) {
  check_cuda(op, x);
  check_floating(op, x);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  DT_CHECK(k >= 1 && x.dim() >= k &&
               std::equal(normalized_shape.begin(), normalized_shape.end(), x.sizes().end() - k),
           op, ": normalized_shape ", shape_str(normalized_shape),
           " must be non-empty and equal the trailing dims of the input ", shape_str(x.sizes()));
  return contiguous(x);
}

// An affine parameter as a contiguous tensor of the compute dtype, or an undefined tensor.
Tensor affine(const char* op, const char* what, const Tensor& x, const std::optional<Tensor>& t,
              const Shape& normalized_shape) {
  if (!t.has_value()) return Tensor();
  check_same_device(op, x, *t, what);
  check_floating(op, *t, what);
  DT_CHECK(t->sizes() == normalized_shape, op, ": ", what, " ", shape_str(t->sizes()),
           " does not match normalized_shape ", shape_str(normalized_shape));
  return contiguous(to(*t, dtype_of(compute_of(x.dtype()))));
}

Tensor norm_impl(const char* op, bool rms, const Tensor& x, const Shape& normalized_shape,
                 const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                 double eps) {
  Tensor rows = normalized_rows(op, x, normalized_shape);
  const int64_t n = numel(normalized_shape);
  const int64_t count = n == 0 ? 0 : x.numel() / n;
  DeviceGuard guard(x.device().index);
  Tensor w = affine(op, "weight", x, weight, normalized_shape);
  Tensor b = affine(op, "bias", x, bias, normalized_shape);
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  launch_norm(rms, compute_of(x.dtype()), rows.data_ptr(), x.dtype(),
              w.defined() ? w.data_ptr() : nullptr, b.defined() ? b.data_ptr() : nullptr,
              out.data_ptr(), count, n, eps, stream_of(x));
  check_launch(op);
  return out;
}

Tensor gather_rows(const char* op, const Tensor& table, const Tensor& indices, int64_t lo,
                   int64_t hi, bool masked) {
  check_cuda(op, table, "weight");
  check_same_device(op, table, indices, "indices");
  DT_CHECK(table.dim() == 2, op, ": weight must be 2-d [num_embeddings, embedding_dim], got ",
           shape_str(table.sizes()));
  DT_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()), " ",
           shape_str(indices.sizes()));
  DeviceGuard guard(table.device().index);
  const Tensor w = contiguous(table);
  const Tensor idx = contiguous(indices);
  Shape out_shape = indices.sizes();
  out_shape.push_back(w.size(1));
  Tensor out = Tensor::empty(out_shape, w.dtype(), w.device());
  Tensor record = zeros({2}, DType::kInt64, w.device());
  launch_embedding(w.data_ptr(), w.size(0), w.size(1), w.element_size(), idx.data_ptr(),
                   idx.dtype(), idx.numel(), masked, lo, hi, out.data_ptr(),
                   static_cast<int64_t*>(record.data_ptr()), stream_of(w));
  check_launch(op);
  if (!masked && out.numel() > 0) {
    auto [bad, v] = read_error_record(record);
    DT_CHECK(bad == 0, op, ": index ", v, " out of range for weight ", shape_str(w.sizes()),
             " (accepted: 0 <= index < ", hi, ")");
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", false, x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl("log_softmax", true, x, dim);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                  double eps) {
  return norm_impl("layer_norm", false, x, normalized_shape, weight, bias, eps);
}

std::vector<Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                        const Shape& normalized_shape,
                                        const std::optional<Tensor>& weight, double eps) {
  const char* op = "layer_norm_backward";
  Tensor rows = normalized_rows(op, x, normalized_shape);
  check_same_device(op, x, grad_out, "grad_out");
  check_floating(op, grad_out, "grad_out");
  DT_CHECK(grad_out.sizes() == x.sizes(), op, ": grad_out ", shape_str(grad_out.sizes()),
           " must have the input's shape ", shape_str(x.sizes()));
  if (weight.has_value()) {
    check_same_device(op, x, *weight, "weight");
    check_floating(op, *weight, "weight");
    DT_CHECK(weight->sizes() == normalized_shape, op, ": weight ", shape_str(weight->sizes()),
             " does not match normalized_shape ", shape_str(normalized_shape));
  }
  const int64_t n = numel(normalized_shape);
  const int64_t count = n == 0 ? 0 : x.numel() / n;
  DeviceGuard guard(x.device().index);
  const Tensor g = contiguous(grad_out);
  const Tensor w = weight.has_value() ? contiguous(*weight) : Tensor();
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor dw = Tensor::empty(normalized_shape, DType::kFloat64, x.device());
  Tensor db = Tensor::empty(normalized_shape, DType::kFloat64, x.device());
  Tensor ws = Tensor::empty({std::max<int64_t>(layer_norm_backward_workspace(count, n), 1)},
                            DType::kFloat64, x.device());
  launch_layer_norm_backward(rows.data_ptr(), x.dtype(), g.data_ptr(), g.dtype(),
                             w.defined() ? w.data_ptr() : nullptr,
                             w.defined() ? w.dtype() : DType::kFloat64, dx.data_ptr(),
                             static_cast<double*>(dw.data_ptr()), static_cast<double*>(db.data_ptr()),
                             static_cast<double*>(ws.data_ptr()), count, n, eps, stream_of(x));
  check_launch(op);
  const DType wt = weight.has_value() ? weight->dtype() : x.dtype();
  return {dx, to(dw, wt), to(db, wt)};
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                std::optional<double> eps) {
  double e = 0;
  switch (x.dtype()) {
    case DType::kFloat64:
      e = 0x1p-52;
      break;
    case DType::kBFloat16:
      e = 0x1p-7;
      break;
    case DType::kFloat16:
      e = 0x1p-10;
      break;
    default:
      e = 0x1p-23;
      break;
  }
  return norm_impl("rms_norm", true, x, normalized_shape, weight, std::nullopt, eps.value_or(e));
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_cuda("embedding", weight, "weight");
  DT_CHECK(weight.dim() == 2, "embedding: weight must be 2-d [num_embeddings, embedding_dim], got ",
           shape_str(weight.sizes()));
  return gather_rows("embedding", weight, indices, 0, weight.size(0), false);
}

Tensor embedding_masked(const Tensor& weight_shard, const Tensor& indices, int64_t row_start,
                        int64_t row_end) {
  check_cuda("embedding_masked", weight_shard, "weight shard");
  DT_CHECK(weight_shard.dim() == 2 && row_start >= 0 && row_end - row_start == weight_shard.size(0),
           "embedding_masked: weight shard ", shape_str(weight_shard.sizes()),
           " does not hold rows [", row_start, ", ", row_end,
           ") (accepted: a 2-d shard with row_end - row_start rows, row_start >= 0)");
  return gather_rows("embedding_masked", weight_shard, indices, row_start, row_end, true);
}

}  // namespace dtensor::kernels::cuda
