#include "kernels/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <numbers>

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

}  // namespace dtensor::kernels::vec
