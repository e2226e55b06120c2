// Backward kernels of kernels/cpu/backward.h (host side; device code in loss_kernels.cu and
// index_kernels.cu). gelu_backward is with the pointwise ops (pointwise.cc).
#include <cstdint>

#include "dtensor/core/cuda/cuda_storage.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

// weight[target] per target (0 for ignored ones), as a [count] tensor of the compute type c.
Tensor target_weights(const Tensor& target, const Tensor& weight, int64_t num_classes,
                      int64_t ignore_index, Compute c) {
  const Tensor t = contiguous(target);
  Tensor w = Tensor::empty({t.numel()}, dtype_of(c), t.device());
  launch_target_weights(c, t.data_ptr(), t.dtype(), t.numel(),
                        weight.defined() ? weight.data_ptr() : nullptr, num_classes, ignore_index,
                        w.data_ptr(), stream_of(t));
  check_launch("nll_loss");
  return w;
}

}  // namespace

Tensor embedding_dense_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                                int64_t padding_idx, int64_t row_start, int64_t row_count) {
  const char* op = "embedding_dense_backward";
  check_cuda(op, grad, "grad_output");
  check_same_device(op, grad, indices, "indices");
  DT_CHECK(is_floating(grad.dtype()), op, ": grad_output must be floating, got ",
           dtype_name(grad.dtype()));
  DT_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()));
  const Shape& lead = grad.sizes();
  DT_CHECK(
      grad.dim() == indices.dim() + 1 && Shape(lead.begin(), lead.end() - 1) == indices.sizes(), op,
      ": grad_output ", shape_str(grad.sizes()), " must be [*indices.shape, D] for indices ",
      shape_str(indices.sizes()));
  DT_CHECK(num_weights >= 0, op, ": num_weights ", num_weights, " must be >= 0");
  if (row_count < 0) row_count = num_weights - row_start;
  DT_CHECK(row_start >= 0 && row_count >= 0 && row_start + row_count <= num_weights, op, ": rows [",
           row_start, ", ", row_start + row_count, ") outside [0, ", num_weights, ")");
  DeviceGuard guard(grad.device().index);
  const int64_t d = grad.size(-1);
  const Compute c = compute_of(grad.dtype());
  const Tensor g = contiguous(grad);
  const Tensor idx = contiguous(indices);
  const int64_t count = idx.numel();
  // float32 / float64 accumulate straight into the result; 16-bit grads in a float buffer.
  Tensor acc = zeros({row_count, d}, dtype_of(c), grad.device());
  Tensor record = zeros({2}, DType::kInt64, grad.device());
  int64_t* bad = static_cast<int64_t*>(record.data_ptr());
  launch_embedding_backward(c, g.data_ptr(), g.dtype(), idx.data_ptr(), idx.dtype(), count, d,
                            num_weights, padding_idx, row_start, row_count, acc.data_ptr(), bad,
                            stream_of(grad));
  if (d == 0)  // no elements to add: the range check still applies
    launch_check_indices(idx.data_ptr(), idx.dtype(), count, num_weights, false, 0, bad,
                         stream_of(grad));
  check_launch(op);
  if (count > 0) {
    auto [flag, v] = read_error_record(record);
    DT_CHECK(flag == 0, op, ": index ", v, " out of range (accepted: 0 <= index < ", num_weights,
             ")");
  }
  return to(acc, grad.dtype());
}

double nll_loss_total_weight(const Tensor& target, const std::optional<Tensor>& weight,
                             int64_t ignore_index) {
  const char* op = "nll_loss";
  check_cuda(op, target, "target");
  DT_CHECK(target.dtype() == DType::kInt64 || target.dtype() == DType::kInt32, op,
           ": target must hold class indices (int64 or int32), got ", dtype_name(target.dtype()));
  DeviceGuard guard(target.device().index);
  Tensor w;
  int64_t classes = INT64_MAX;
  if (weight.has_value()) {
    check_same_device(op, target, *weight, "weight");
    w = contiguous(to(*weight, DType::kFloat64));
    classes = w.numel();
    const Tensor t = contiguous(target);
    Tensor record = zeros({2}, DType::kInt64, target.device());
    launch_check_indices(t.data_ptr(), t.dtype(), t.numel(), classes, true, ignore_index,
                         static_cast<int64_t*>(record.data_ptr()), stream_of(t));
    check_launch(op);
    auto [flag, v] = read_error_record(record);
    DT_CHECK(flag == 0, "nll_loss: target ", v, " out of range for ", classes, " classes");
  }
  const Tensor total = sum(target_weights(target, w, classes, ignore_index, Compute::kDouble), {}, false);
  return ::dtensor::to_device(total, ::dtensor::cpu()).item();
}

Tensor nll_loss_backward(const Tensor& grad_output, const Shape& input_shape, DType dtype,
                         const Tensor& target, const std::optional<Tensor>& weight,
                         const std::string& reduction, int64_t ignore_index,
                         std::optional<double> total_weight, int64_t class_start,
                         int64_t num_classes) {
  const char* op = "nll_loss_backward";
  DT_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", op,
           ": unknown reduction '", reduction, "' (accepted: \"mean\", \"sum\", \"none\")");
  check_cuda(op, grad_output, "grad_output");
  check_same_device(op, grad_output, target, "target");
  DT_CHECK(input_shape.size() == 1 || input_shape.size() == 2, op,
           ": input must be [N, C] or [C], got ", shape_str(input_shape));
  DT_CHECK(is_floating(dtype), op, ": the gradient must be floating, got ", dtype_name(dtype));
  const int64_t c_local = input_shape.back();
  const int64_t n = input_shape.size() == 2 ? input_shape[0] : 1;
  if (num_classes < 0) num_classes = c_local;
  DT_CHECK(class_start >= 0 && class_start + c_local <= num_classes, op, ": classes [", class_start,
           ", ", class_start + c_local, ") outside [0, ", num_classes, ")");
  const Shape target_shape = input_shape.size() == 2 ? Shape{n} : Shape{};
  DT_CHECK(target.dtype() == DType::kInt64 || target.dtype() == DType::kInt32, op,
           ": target must hold class indices (int64 or int32), got ", dtype_name(target.dtype()));
  DT_CHECK(target.sizes() == target_shape, op, ": target ", shape_str(target.sizes()),
           " does not fit input ", shape_str(input_shape), " (accepted: ", shape_str(target_shape),
           ")");
  const Shape grad_shape = reduction == "none" ? target_shape : Shape{};
  DT_CHECK(grad_output.sizes() == grad_shape && is_floating(grad_output.dtype()), op,
           ": grad_output ", dtype_name(grad_output.dtype()), " ", shape_str(grad_output.sizes()),
           " does not fit reduction '", reduction, "' (accepted: floating ", shape_str(grad_shape),
           ")");
  const Compute c = compute_of(dtype);
  DeviceGuard guard(grad_output.device().index);
  Tensor w;
  if (weight.has_value()) {
    check_same_device(op, grad_output, *weight, "weight");
    DT_CHECK(is_floating(weight->dtype()) && weight->sizes() == Shape{num_classes}, op, ": weight ",
             dtype_name(weight->dtype()), " ", shape_str(weight->sizes()), " (accepted: floating [",
             num_classes, "])");
    w = contiguous(to(*weight, dtype_of(c)));
  }
  const Tensor t = contiguous(target);
  const Tensor g = contiguous(grad_output);
  // The divisor of "mean": given, or the summed weights of the non-ignored targets (on the device).
  Tensor divisor;
  double divisor_value = 1;
  if (reduction == "mean") {
    if (total_weight.has_value())
      divisor_value = *total_weight;
    else
      divisor = sum(target_weights(t, w, num_classes, ignore_index, c), {}, false);
  }
  Tensor out = Tensor::empty(input_shape, dtype, grad_output.device());
  Tensor record = zeros({2}, DType::kInt64, grad_output.device());
  int64_t* bad = static_cast<int64_t*>(record.data_ptr());
  launch_nll_loss_backward(c, g.data_ptr(), g.dtype(), reduction == "none", t.data_ptr(), t.dtype(),
                           n, c_local, class_start, num_classes, ignore_index,
                           w.defined() ? w.data_ptr() : nullptr,
                           divisor.defined() ? divisor.data_ptr() : nullptr, divisor_value,
                           out.data_ptr(), dtype, bad, stream_of(grad_output));
  if (c_local == 0)  // no entries to write: the range check still applies
    launch_check_indices(t.data_ptr(), t.dtype(), n, num_classes, true, ignore_index, bad,
                         stream_of(grad_output));
  check_launch(op);
  auto [flag, v] = read_error_record(record);
  DT_CHECK(flag == 0, op, ": target ", v, " out of range for ", num_classes,
           " classes (accepted: 0 <= target < ", num_classes, ", or ignore_index ", ignore_index,
           ")");
  return out;
}

}  // namespace dtensor::kernels::cuda
