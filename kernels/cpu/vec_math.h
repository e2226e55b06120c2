// Vectorized float32 loops over contiguous spans, for the hot paths of the training step (GELU,
// softmax rows, AdamW). Built on Eigen's array expressions (Eigen 3.4, Debian libeigen3-dev): its
// packet math gives exp/tanh/erf over SIMD lanes where glibc's expf/tanhf/erff are scalar calls.
// float64 callers keep the scalar std:: functions (the float64 --check and PyTorch comparisons stay
// as they were); these entry points are float only.
//
// Accuracy: Eigen's float exp is within 1-2 ulp; its float tanh (a rational approximation, clamped
// to +-1 for |y| > ~9) and erf are within a few ulp, which GELU's 1 + t sees as a few ulp of 1.
#pragma once

#include <cstdint>

namespace dtensor::kernels::vec {

// y[i] = gelu(x[i]); tanh_form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), else
// 0.5 x (1 + erf(x / sqrt 2)) (torch.nn.functional.gelu's two forms). x and y may alias.
void gelu(const float* x, float* y, int64_t n, bool tanh_form);

// out[i] = grad[i] * d gelu(x[i]) / dx, same two forms (torch's gelu_backward). out may alias grad.
void gelu_backward(const float* grad, const float* x, float* out, int64_t n, bool tanh_form);

// row[j] = exp(row[j] - shift) for j < n; returns the sum of the new values (in float, summed by
// Eigen's packet reduction). The softmax numerator and denominator in one pass.
float exp_shifted_sum(float* row, int64_t n, float shift);

// LayerNorm over `rows` contiguous rows of n floats (torch.nn.functional.layer_norm over the last
// dim): y = (x - mean) * rstd * w + b with rstd = 1 / sqrt(var + eps), the biased variance. Mean,
// variance and the affine step are computed in double as the generic kernel does, each sum over
// eight partial sums (vector lanes), so the last bits of a double may differ from a sequential
// sum. w and b hold n values. Compiled for AVX-512, AVX2 and the baseline, chosen at load time.
void layer_norm_rows(const float* x, const double* w, const double* b, float* y, int64_t rows, int64_t n,
                     double eps);
// Its backward for the same rows: dx (rows x n floats) = rstd (g w - mean(g w) - xhat mean(g w xhat));
// dw[i] += sum over rows of g xhat, db[i] += sum of g (n doubles each, accumulated into).
void layer_norm_backward_rows(const float* g, const float* x, const double* w, float* dx, double* dw,
                              double* db, int64_t rows, int64_t n, double eps);

// One AdamW step (decoupled weight decay, Loshchilov & Hutter; torch.optim.AdamW's update) on n
// contiguous elements, in place on param, exp_avg and exp_avg_sq:
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p = p (1 - lr wd) - lr (m / bias1) / (sqrt(v / bias2) + eps)
// bias1 = 1 - beta1^t and bias2 = 1 - beta2^t are the caller's bias corrections for step t.
struct AdamWScalars {
  double lr, beta1, beta2, eps, weight_decay, bias1, bias2;
};
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const AdamWScalars& s);
void adamw_step(double* param, const double* grad, double* exp_avg, double* exp_avg_sq, int64_t n,
                const AdamWScalars& s);

}  // namespace dtensor::kernels::vec
