#include "kernels/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

namespace dtensor::kernels::vec {
namespace {

using ArrF = Eigen::Array<float, Eigen::Dynamic, 1>;
using CMap = Eigen::Map<const ArrF>;
using MMap = Eigen::Map<ArrF>;
// Blocks small enough to stay in L1 while a value is reused (tanh in the GELU derivative).
constexpr int64_t kBlock = 512;

constexpr float kTanhK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;
constexpr float kInvSqrt2 = static_cast<float>(std::numbers::sqrt2 / 2);
constexpr float kInvSqrt2Pi = static_cast<float>(std::numbers::inv_sqrtpi * std::numbers::sqrt2 / 2);

}  // namespace

void gelu(const float* x, float* y, int64_t n, bool tanh_form) {
  CMap X(x, n);
  MMap Y(y, n);
  if (tanh_form)
    Y = 0.5f * X * (1.0f + (kTanhK * (X + kKappa * X.cube())).tanh());
  else
    Y = 0.5f * X * (1.0f + (X * kInvSqrt2).erf());
}

void gelu_backward(const float* grad, const float* x, float* out, int64_t n, bool tanh_form) {
  Eigen::Array<float, kBlock, 1> t;
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    CMap X(x + i0, m), G(grad + i0, m);
    MMap O(out + i0, m);
    auto T = t.head(m);
    if (tanh_form) {
      T = (kTanhK * (X + kKappa * X.cube())).tanh();
      O = G * (0.5f * (1.0f + T) +
               0.5f * X * (1.0f - T.square()) * kTanhK * (1.0f + 3.0f * kKappa * X.square()));
    } else {
      T = (-0.5f * X.square()).exp();
      O = G * (0.5f * (1.0f + (X * kInvSqrt2).erf()) + X * kInvSqrt2Pi * T);
    }
  }
}

float exp_shifted_sum(float* row, int64_t n, float shift) {
  MMap R(row, n);
  R = (R - shift).exp();
  return R.sum();
}

namespace {
template <typename T>
void adamw_impl(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamWScalars& s) {
  using A = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<A> P(param, n), M(exp_avg, n), V(exp_avg_sq, n);
  Eigen::Map<const A> G(grad, n);
  const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2);
  M = b1 * M + static_cast<T>(1 - s.beta1) * G;
  V = b2 * V + static_cast<T>(1 - s.beta2) * G.square();
  const T decay = static_cast<T>(1 - s.lr * s.weight_decay), lr = static_cast<T>(s.lr);
  const T inv_b1 = static_cast<T>(1 / s.bias1), inv_b2 = static_cast<T>(1 / s.bias2);
  P = P * decay - lr * (M * inv_b1) / ((V * inv_b2).sqrt() + static_cast<T>(s.eps));
}
}  // namespace

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s) {
  adamw_impl(p, g, m, v, n, s);
}
void adamw_step(double* p, const double* g, double* m, double* v, int64_t n, const AdamWScalars& s) {
  adamw_impl(p, g, m, v, n, s);
}

// The row loops below are compiled once per instruction set (GCC function multiversioning, chosen
// by the loader): the baseline build targets SSE2 only, where these loops are bound by conversions.
#define DT_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace {

constexpr int kLanes = 8;

// Mean and biased variance of n floats in double, each sum over kLanes partial sums.
[[gnu::always_inline]] inline std::pair<double, double> row_moments(const float* x, int64_t n) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += x[i + k];
  double s = 0;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  for (; i < n; ++i) s += x[i];
  const double mean = n == 0 ? 0 : s / static_cast<double>(n);
  double sq[kLanes] = {};
  for (i = 0; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const double d = x[i + k] - mean;
      sq[k] += d * d;
    }
  double v = 0;
  for (int k = 0; k < kLanes; ++k) v += sq[k];
  for (; i < n; ++i) v += (x[i] - mean) * (x[i] - mean);
  return {mean, n == 0 ? 0 : v / static_cast<double>(n)};
}

}  // namespace

DT_VEC_CLONES
void layer_norm_rows(const float* x, const double* w, const double* b, float* y, int64_t rows, int64_t n,
                     double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const auto [mean, var] = row_moments(xr, n);
    const double inv = 1 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = static_cast<float>((xr[i] - mean) * inv * w[i] + b[i]);
  }
}

DT_VEC_CLONES
void layer_norm_backward_rows(const float* g, const float* x, const double* w, float* dx, double* dw,
                              double* db, int64_t rows, int64_t n, double eps) {
  std::vector<double> xhat(static_cast<size_t>(n));
  const double inv_n = n == 0 ? 0 : 1 / static_cast<double>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* gr = g + r * n;
    const auto [mean, var] = row_moments(xr, n);
    const double rstd = 1 / std::sqrt(var + eps);
    double s_gw[kLanes] = {}, s_gwx[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int k = 0; k < kLanes; ++k) {
        const int64_t j = i + k;
        xhat[j] = (xr[j] - mean) * rstd;
        const double gw = gr[j] * w[j];
        s_gw[k] += gw;
        s_gwx[k] += gw * xhat[j];
      }
    double sum_gw = 0, sum_gwx = 0;
    for (int k = 0; k < kLanes; ++k) {
      sum_gw += s_gw[k];
      sum_gwx += s_gwx[k];
    }
    for (; i < n; ++i) {
      xhat[i] = (xr[i] - mean) * rstd;
      const double gw = gr[i] * w[i];
      sum_gw += gw;
      sum_gwx += gw * xhat[i];
    }
    const double a = sum_gw * inv_n, c = sum_gwx * inv_n;
    float* dr = dx + r * n;
    for (i = 0; i < n; ++i) {
      dw[i] += gr[i] * xhat[i];
      db[i] += gr[i];
      dr[i] = static_cast<float>(rstd * (gr[i] * w[i] - a - xhat[i] * c));
    }
  }
}

}  // namespace dtensor::kernels::vec
