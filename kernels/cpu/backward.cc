#include "kernels/cpu/backward.h"
#include "kernels/device_dispatch.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/cpu/tanh_exp.h"
#include "kernels/cpu/vec_math.h"

namespace dtensor::kernels {

Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  DT_KERNEL_ON_DEVICE(gelu_backward, grad, x, approximate);
  const char* op = "gelu_backward";
  DT_CHECK(approximate == "none" || approximate == "tanh", op, ": unknown approximate '",
           approximate, "' (accepted: \"none\", \"tanh\")");
  DT_CHECK(is_floating(grad.dtype()) && is_floating(x.dtype()), op,
           ": grad and self must be floating, got ", dtype_name(grad.dtype()), " ",
           shape_str(grad.sizes()), " and ", dtype_name(x.dtype()), " ", shape_str(x.sizes()));
  const Shape shape = detail::broadcast_op(op, grad.sizes(), x.sizes());
  const DType out = promote_types(grad.dtype(), x.dtype());
  const DType c = detail::compute_dtype(out);
  const bool tanh_form = approximate == "tanh";
  if (grad.dtype() == DType::kFloat32 && x.dtype() == DType::kFloat32 && grad.sizes() == x.sizes() &&
      grad.is_contiguous() && x.is_contiguous()) {  // the training step's hot path
    Tensor o = Tensor::empty(shape, DType::kFloat32);
    vec::gelu_backward(grad.data<float>(), x.data<float>(), o.data<float>(), x.numel(), tanh_form);
    return o;
  }
  return detail::dispatch_float(c, [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::array<Tensor, 2> in{grad.to(c).expand(shape), x.to(c).expand(shape)};
    Tensor o = Tensor::empty(shape, c);
    if (tanh_form) {
      const T k = static_cast<T>(std::sqrt(2 / std::numbers::pi));
      const T kappa = static_cast<T>(0.044715);
      detail::map<T, T>(o, in, [=](T g, T v) {
        const T v2 = v * v;
        const T t = detail::tanh_exp(k * (v + kappa * v2 * v));
        const T d = T(0.5) * (1 + t) + T(0.5) * v * (1 - t * t) * k * (1 + 3 * kappa * v2);
        return g * d;
      });
    } else {
      const T inv_sqrt2 = static_cast<T>(std::numbers::sqrt2 / 2);
      const T inv_sqrt2pi = static_cast<T>(std::numbers::inv_sqrtpi * std::numbers::sqrt2 / 2);
      detail::map<T, T>(o, in, [=](T g, T v) {
        const T cdf = T(0.5) * (1 + std::erf(v * inv_sqrt2));
        const T pdf = inv_sqrt2pi * std::exp(T(-0.5) * v * v);
        return g * (cdf + v * pdf);
      });
    }
    return o.to(out);
  });
}

Tensor embedding_dense_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                                int64_t padding_idx, int64_t row_start, int64_t row_count) {
  DT_KERNEL_ON_DEVICE(embedding_dense_backward, grad, indices, num_weights, padding_idx, row_start, row_count);
  const char* op = "embedding_dense_backward";
  DT_CHECK(is_floating(grad.dtype()), op, ": grad_output must be floating, got ",
           dtype_name(grad.dtype()));
  DT_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()));
  Shape lead = grad.sizes();
  DT_CHECK(grad.dim() == indices.dim() + 1 &&
               Shape(lead.begin(), lead.end() - 1) == indices.sizes(),
           op, ": grad_output ", shape_str(grad.sizes()), " must be [*indices.shape, D] for indices ",
           shape_str(indices.sizes()));
  DT_CHECK(num_weights >= 0, op, ": num_weights ", num_weights, " must be >= 0");
  if (row_count < 0) row_count = num_weights - row_start;
  DT_CHECK(row_start >= 0 && row_count >= 0 && row_start + row_count <= num_weights, op,
           ": rows [", row_start, ", ", row_start + row_count, ") outside [0, ", num_weights, ")");
  const int64_t d = grad.size(-1);
  const Tensor g = grad.to(DType::kFloat64).contiguous();
  const double* gp = g.data<double>();
  const std::vector<int64_t> idx = indices.to_vector<int64_t>();
  std::vector<double> acc(static_cast<size_t>(row_count * d), 0.0);
  for (size_t i = 0; i < idx.size(); ++i) {
    const int64_t v = idx[i];
    DT_CHECK(v >= 0 && v < num_weights, op, ": index ", v, " out of range (accepted: 0 <= index < ",
             num_weights, ")");
    if (v == padding_idx || v < row_start || v >= row_start + row_count) continue;
    double* dst = acc.data() + (v - row_start) * d;
    const double* src = gp + static_cast<int64_t>(i) * d;
    for (int64_t j = 0; j < d; ++j) dst[j] += src[j];
  }
  return Tensor::from_vector(acc, {row_count, d}).to(grad.dtype());
}

double nll_loss_total_weight(const Tensor& target, const std::optional<Tensor>& weight,
                             int64_t ignore_index) {
  DT_KERNEL_HOST_ONLY(nll_loss_total_weight, target, weight, ignore_index);
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  std::vector<double> w;
  if (weight.has_value()) w = weight->to_vector<double>();
  double total = 0;
  for (int64_t v : t) {
    if (v == ignore_index) continue;
    if (!w.empty()) {
      DT_CHECK(v >= 0 && v < static_cast<int64_t>(w.size()), "nll_loss: target ", v,
               " out of range for ", w.size(), " classes");
      total += w[v];
    } else {
      total += 1;
    }
  }
  return total;
}

Tensor nll_loss_backward(const Tensor& grad_output, const Shape& input_shape, DType dtype,
                         const Tensor& target, const std::optional<Tensor>& weight,
                         const std::string& reduction, int64_t ignore_index,
                         std::optional<double> total_weight, int64_t class_start,
                         int64_t num_classes) {
  DT_KERNEL_ON_DEVICE(nll_loss_backward, grad_output, input_shape, dtype, target, weight, reduction, ignore_index, total_weight, class_start, num_classes);
  const char* op = "nll_loss_backward";
  DT_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", op,
           ": unknown reduction '", reduction, "' (accepted: \"mean\", \"sum\", \"none\")");
  DT_CHECK(input_shape.size() == 1 || input_shape.size() == 2, op, ": input must be [N, C] or [C], got ",
           shape_str(input_shape));
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
  DT_CHECK(grad_output.sizes() == grad_shape && is_floating(grad_output.dtype()), op, ": grad_output ",
           dtype_name(grad_output.dtype()), " ", shape_str(grad_output.sizes()),
           " does not fit reduction '", reduction, "' (accepted: floating ", shape_str(grad_shape), ")");
  std::vector<double> w(static_cast<size_t>(num_classes), 1.0);
  if (weight.has_value()) {
    DT_CHECK(is_floating(weight->dtype()) && weight->sizes() == Shape{num_classes}, op, ": weight ",
             dtype_name(weight->dtype()), " ", shape_str(weight->sizes()), " (accepted: floating [",
             num_classes, "])");
    w = weight->to_vector<double>();
  }
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  for (int64_t v : t)
    DT_CHECK(v == ignore_index || (v >= 0 && v < num_classes), op, ": target ", v,
             " out of range for ", num_classes, " classes (accepted: 0 <= target < ", num_classes,
             ", or ignore_index ", ignore_index, ")");
  double divisor = 1;
  if (reduction == "mean")
    divisor = total_weight.has_value() ? *total_weight : nll_loss_total_weight(target, weight, ignore_index);
  const std::vector<double> g = grad_output.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(n * c_local), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = t[i];
    if (v == ignore_index) continue;
    const int64_t col = v - class_start;
    if (col < 0 || col >= c_local) continue;
    double gi = reduction == "none" ? g[i] : g[0];
    if (reduction == "mean") gi /= divisor;
    out[i * c_local + col] = -w[v] * gi;
  }
  return Tensor::from_vector(out, input_shape).to(dtype);
}

namespace {

// Python's slice normalization of (start, end) against a dim of `size` (step >= 1).
std::pair<int64_t, int64_t> normalize_slice(int64_t start, int64_t end, int64_t size) {
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  return {start, end};
}

}  // namespace

Tensor slice_backward_block(const Tensor& grad, const Shape& grad_offset, const Shape& input_sizes,
                            int64_t dim, int64_t start, int64_t end, int64_t step,
                            const Shape& out_shape, const Shape& out_offset) {
  DT_KERNEL_HOST_ONLY(slice_backward_block, grad, grad_offset, input_sizes, dim, start, end, step, out_shape, out_offset);
  const char* op = "slice_backward";
  const int64_t rank = static_cast<int64_t>(input_sizes.size());
  dim = wrap_dim(dim, rank, op);
  DT_CHECK(step >= 1, op, ": step ", step, " must be >= 1");
  std::tie(start, end) = normalize_slice(start, end, input_sizes[dim]);
  const int64_t len = (end - start + step - 1) / step;
  DT_CHECK(grad.dim() == rank && static_cast<int64_t>(grad_offset.size()) == rank &&
               static_cast<int64_t>(out_shape.size()) == rank &&
               static_cast<int64_t>(out_offset.size()) == rank,
           op, ": grad ", shape_str(grad.sizes()), " does not fit input_sizes ", shape_str(input_sizes));
  Tensor out = Tensor::zeros(out_shape, grad.dtype());
  Tensor o = out, g = grad;
  for (int64_t k = 0; k < rank; ++k) {
    if (k != dim) {
      const int64_t lo = std::max(out_offset[k], grad_offset[k]);
      const int64_t hi = std::min(out_offset[k] + out_shape[k], grad_offset[k] + grad.size(k));
      if (hi <= lo) return out;
      o = o.narrow(k, lo - out_offset[k], hi - lo);
      g = g.narrow(k, lo - grad_offset[k], hi - lo);
      continue;
    }
    // Slice positions j (global position start + j * step) inside both blocks.
    const int64_t olo = out_offset[k], ohi = out_offset[k] + out_shape[k];
    if (ohi <= start) return out;
    int64_t jlo = olo <= start ? 0 : (olo - start + step - 1) / step;
    int64_t jhi = (ohi - 1 - start) / step + 1;
    jlo = std::max(jlo, grad_offset[k]);
    jhi = std::min({jhi, len, grad_offset[k] + grad.size(k)});
    if (jhi <= jlo) return out;
    const int64_t first = start + jlo * step - olo;
    o = o.slice(k, first, first + (jhi - jlo - 1) * step + 1, step);
    g = g.narrow(k, jlo - grad_offset[k], jhi - jlo);
  }
  o.copy_(g);
  return out;
}

Tensor slice_backward(const Tensor& grad, const Shape& input_sizes, int64_t dim, int64_t start,
                      int64_t end, int64_t step) {
  DT_KERNEL_HOST_ONLY(slice_backward, grad, input_sizes, dim, start, end, step);
  const char* op = "slice_backward";
  const int64_t rank = static_cast<int64_t>(input_sizes.size());
  dim = wrap_dim(dim, rank, op);
  DT_CHECK(step >= 1, op, ": step ", step, " must be >= 1");
  auto [s, e] = normalize_slice(start, end, input_sizes[dim]);
  Shape want = input_sizes;
  want[dim] = (e - s + step - 1) / step;
  DT_CHECK(grad.sizes() == want, op, ": grad ", shape_str(grad.sizes()), " does not fit input_sizes ",
           shape_str(input_sizes), " sliced along dim ", dim, " by ", s, ":", e, ":", step,
           " (accepted: ", shape_str(want), ")");
  return slice_backward_block(grad, Shape(rank, 0), input_sizes, dim, s, e, step, input_sizes,
                              Shape(rank, 0));
}

Tensor select_backward(const Tensor& grad, const Shape& input_sizes, int64_t dim, int64_t index) {
  DT_KERNEL_HOST_ONLY(select_backward, grad, input_sizes, dim, index);
  const char* op = "select_backward";
  const int64_t rank = static_cast<int64_t>(input_sizes.size());
  dim = wrap_dim(dim, rank, op);
  const int64_t size = input_sizes[dim];
  DT_CHECK(index >= -size && index < size, op, ": index ", index, " out of range for dim ", dim,
           " of size ", size, " (accepted: ", -size, " <= index < ", size, ")");
  if (index < 0) index += size;
  Shape want = input_sizes;
  want.erase(want.begin() + dim);
  DT_CHECK(grad.sizes() == want, op, ": grad ", shape_str(grad.sizes()), " does not fit input_sizes ",
           shape_str(input_sizes), " without dim ", dim, " (accepted: ", shape_str(want), ")");
  return slice_backward_block(grad.unsqueeze(dim), Shape(rank, 0), input_sizes, dim, index,
                              index + 1, 1, input_sizes, Shape(rank, 0));
}

}  // namespace dtensor::kernels
