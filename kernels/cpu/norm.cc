#include "kernels/cpu/norm.h"
#include "kernels/device_dispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/loops.h"

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
  return detail::map_rows(x, dim, x.dtype(), [](const double* in, double* out, int64_t n) {
    const double m = row_max(in, n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(in[i] - m);
    const double shift = m + std::log(s);
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] - shift;
  });
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                  double eps) {
  DT_KERNEL_ON_DEVICE(layer_norm, x, normalized_shape, weight, bias, eps);
  Tensor rows = normalized_rows("layer_norm", x, normalized_shape);
  const std::vector<double> w = affine("layer_norm", "weight", weight, normalized_shape, 1);
  const std::vector<double> b = affine("layer_norm", "bias", bias, normalized_shape, 0);
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
