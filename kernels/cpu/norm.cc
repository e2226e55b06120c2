#include "kernels/cpu/norm.h"
#include "kernels/device_dispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/vec_math.h"

namespace dtensor::kernels {
namespace {

void check_floating(const char* op, const Tensor& t, const char* what) {
  DT_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating, got ", dtype_name(t.dtype()),
           " ", shape_str(t.sizes()), " (accepted: float32, float64, bfloat16, float16)");
}

double row_max(const double* p, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, p[i]);
  return m;
}

// The affine parameter of a normalization as float64 values, or `fill` when absent.
std::vector<double> affine(const char* op, const char* what, const std::optional<Tensor>& t,
                           const Shape& normalized_shape, double fill) {
  if (!t.has_value()) return std::vector<double>(numel(normalized_shape), fill);
  check_floating(op, *t, what);
  DT_CHECK(t->sizes() == normalized_shape, op, ": ", what, " ", shape_str(t->sizes()),
           " does not match normalized_shape ", shape_str(normalized_shape));
  return t->to_vector<double>();
}

// x as [outer, N] rows with N = numel(normalized_shape), after checking the trailing dims.
Tensor normalized_rows(const char* op, const Tensor& x, const Shape& normalized_shape) {
  check_floating(op, x, "input");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  DT_CHECK(k >= 1 && x.dim() >= k &&
               std::equal(normalized_shape.begin(), normalized_shape.end(), x.sizes().end() - k),
           op, ": normalized_shape ", shape_str(normalized_shape),
           " must be non-empty and equal the trailing dims of the input ", shape_str(x.sizes()));
  return x.reshape({numel(Shape(x.sizes().begin(), x.sizes().end() - k)), numel(normalized_shape)});
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  DT_KERNEL_ON_DEVICE(softmax, x, dim);
  check_floating("softmax", x, "input");
  dim = wrap_dim(dim, x.dim(), "softmax");
  return detail::map_rows(x, dim, x.dtype(), [](const double* in, double* out, int64_t n) {
    const double m = row_max(in, n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += out[i] = std::exp(in[i] - m);
    for (int64_t i = 0; i < n; ++i) out[i] /= s;
  });
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  DT_KERNEL_ON_DEVICE(log_softmax, x, dim);
  check_floating("log_softmax", x, "input");
  dim = wrap_dim(dim, x.dim(), "log_softmax");
  return detail::map_rows(x, dim, x.dtype(), log_softmax_row);
}

void log_softmax_row(const double* in, double* out, int64_t n) {
  const double m = row_max(in, n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(in[i] - m);
  const double log_s = std::log(s);
  for (int64_t i = 0; i < n; ++i) out[i] = (in[i] - m) - log_s;  // reads in[i] before out[i]: in place is fine
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                  double eps) {
  DT_KERNEL_ON_DEVICE(layer_norm, x, normalized_shape, weight, bias, eps);
  Tensor rows = normalized_rows("layer_norm", x, normalized_shape);
  const std::vector<double> w = affine("layer_norm", "weight", weight, normalized_shape, 1);
  const std::vector<double> b = affine("layer_norm", "bias", bias, normalized_shape, 0);
  if (rows.dtype() == DType::kFloat32 && rows.is_contiguous()) {  // the training step's hot path
    Tensor y = Tensor::empty(rows.sizes(), DType::kFloat32);
    vec::layer_norm_rows(rows.data<float>(), w.data(), b.data(), y.data<float>(), rows.size(0), rows.size(1), eps);
    return y.view(x.sizes());
  }
  Tensor y = detail::map_rows(rows, -1, x.dtype(), [&](const double* in, double* out, int64_t n) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += in[i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (in[i] - mean) * (in[i] - mean);
    const double inv = 1 / std::sqrt(var / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) out[i] = (in[i] - mean) * inv * w[i] + b[i];
  });
  return y.view(x.sizes());
}

std::vector<Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                                        const std::optional<Tensor>& weight, double eps) {
  DT_KERNEL_ON_DEVICE(layer_norm_backward, grad_out, x, normalized_shape, weight, eps);
  const char* op = "layer_norm_backward";
  const Tensor rows = normalized_rows(op, x, normalized_shape);
  check_floating(op, grad_out, "grad_out");
  DT_CHECK(grad_out.sizes() == x.sizes(), op, ": grad_out ", shape_str(grad_out.sizes()),
           " must have the input's shape ", shape_str(x.sizes()));
  const std::vector<double> w = affine(op, "weight", weight, normalized_shape, 1);
  const int64_t outer = rows.size(0), n = rows.size(1);
  const bool f32 = x.dtype() == DType::kFloat32;  // dx written as float32 directly, else via float64
  Tensor dx = Tensor::empty(rows.sizes(), f32 ? DType::kFloat32 : DType::kFloat64);
  std::vector<double> dw(static_cast<size_t>(n), 0.0), db(static_cast<size_t>(n), 0.0), xhat(static_cast<size_t>(n));
  const DType wt = weight ? weight->dtype() : x.dtype();
  auto param_grad = [&](const std::vector<double>& v) {
    Tensor t = Tensor::empty(normalized_shape, DType::kFloat64);
    std::copy(v.begin(), v.end(), t.data<double>());
    return t.to(wt);
  };
  const Tensor g_rows = grad_out.reshape(rows.sizes());
  if (f32 && grad_out.dtype() == DType::kFloat32 && rows.is_contiguous() && g_rows.is_contiguous()) {
    vec::layer_norm_backward_rows(g_rows.data<float>(), rows.data<float>(), w.data(), dx.data<float>(), dw.data(),
                                  db.data(), outer, n, eps);
    return {dx.view(x.sizes()), param_grad(dw), param_grad(db)};
  }
  detail::RowReader xr(rows, n), gr(g_rows, n);
  const double inv_n = n == 0 ? 0 : 1 / static_cast<double>(n);
  for (int64_t r = 0; r < outer; ++r) {
    const double* xi = xr.row(r);
    const double* gi = gr.row(r);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += xi[i];
    mean *= inv_n;
    for (int64_t i = 0; i < n; ++i) var += (xi[i] - mean) * (xi[i] - mean);
    const double rstd = 1 / std::sqrt(var * inv_n + eps);
    double sum_gw = 0, sum_gwx = 0;
    for (int64_t i = 0; i < n; ++i) {
      xhat[i] = (xi[i] - mean) * rstd;
      const double gw = gi[i] * w[i];
      sum_gw += gw;
      sum_gwx += gw * xhat[i];
      dw[i] += gi[i] * xhat[i];
      db[i] += gi[i];
    }
    const double a = sum_gw * inv_n, b = sum_gwx * inv_n;
    if (f32) {
      float* dp = dx.data<float>() + r * n;
      for (int64_t i = 0; i < n; ++i) dp[i] = static_cast<float>(rstd * (gi[i] * w[i] - a - xhat[i] * b));
    } else {
      double* dp = dx.data<double>() + r * n;
      for (int64_t i = 0; i < n; ++i) dp[i] = rstd * (gi[i] * w[i] - a - xhat[i] * b);
    }
  }
  return {dx.to(x.dtype()).view(x.sizes()), param_grad(dw), param_grad(db)};
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                std::optional<double> eps) {
  DT_KERNEL_ON_DEVICE(rms_norm, x, normalized_shape, weight, eps);
  Tensor rows = normalized_rows("rms_norm", x, normalized_shape);
  const std::vector<double> w = affine("rms_norm", "weight", weight, normalized_shape, 1);
  double e = 0;
  switch (x.dtype()) {
    case DType::kFloat64:
      e = std::numeric_limits<double>::epsilon();
      break;
    case DType::kBFloat16:
      e = 0x1p-7;
      break;
    case DType::kFloat16:
      e = 0x1p-10;
      break;
    default:
      e = std::numeric_limits<float>::epsilon();
      break;
  }
  e = eps.value_or(e);
  Tensor y = detail::map_rows(rows, -1, x.dtype(), [&](const double* in, double* out, int64_t n) {
    double ms = 0;
    for (int64_t i = 0; i < n; ++i) ms += in[i] * in[i];
    const double inv = 1 / std::sqrt(ms / static_cast<double>(n) + e);
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] * inv * w[i];
  });
  return y.view(x.sizes());
}

}  // namespace dtensor::kernels
