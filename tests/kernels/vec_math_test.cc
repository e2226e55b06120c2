// The vectorized float loops (kernels/cpu/vec_math.h) against the same formulas in double with
// std:: functions, over values from the tails (|x| up to 30, where tanh and erf saturate) to 0.
#include "kernels/cpu/vec_math.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "gtest/gtest.h"

namespace dtensor::kernels {
namespace {

std::vector<float> inputs() {
  std::vector<float> x;
  for (int i = -3000; i <= 3000; ++i) x.push_back(static_cast<float>(i) * 0.01f);  // [-30, 30]
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, 88.0f, -88.0f}) x.push_back(v);
  return x;  // 6008 values: not a multiple of any SIMD width or of the block size
}

double gelu_ref(double v, bool tanh_form) {
  if (tanh_form)
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
  return 0.5 * v * (1 + std::erf(v / std::numbers::sqrt2));
}

double gelu_grad_ref(double v, bool tanh_form) {
  if (tanh_form) {
    const double k = std::sqrt(2 / std::numbers::pi), t = std::tanh(k * (v + 0.044715 * v * v * v));
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
  }
  return 0.5 * (1 + std::erf(v / std::numbers::sqrt2)) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
}

// |got - want| <= tol * max(1, |want|): relative, absolute near 0.
void expect_close(float got, double want, double x, double tol = 1e-6) {
  EXPECT_LE(std::abs(got - want), tol * std::max(1.0, std::abs(want))) << "at x = " << x;
}

TEST(VecMath, GeluBothForms) {
  const std::vector<float> x = inputs();
  for (bool tanh_form : {true, false}) {
    std::vector<float> y(x.size());
    vec::gelu(x.data(), y.data(), static_cast<int64_t>(x.size()), tanh_form);
    for (size_t i = 0; i < x.size(); ++i) expect_close(y[i], gelu_ref(x[i], tanh_form), x[i]);
  }
}

TEST(VecMath, GeluBackwardBothForms) {
  const std::vector<float> x = inputs();
  std::vector<float> g(x.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
  for (bool tanh_form : {true, false}) {
    std::vector<float> out(x.size());
    vec::gelu_backward(g.data(), x.data(), out.data(), static_cast<int64_t>(x.size()), tanh_form);
    for (size_t i = 0; i < x.size(); ++i)
      // 1e-5: in float, 1 - t^2 loses digits where tanh saturates (|x| ~ 3 to 9), times |x|^3 terms.
      expect_close(out[i], g[i] * gelu_grad_ref(x[i], tanh_form), x[i], 1e-5);
  }
}

TEST(VecMath, ExpShiftedSum) {
  std::vector<float> row;
  for (int i = 0; i < 37; ++i) row.push_back(static_cast<float>(i) * 0.5f - 9.0f);
  const float shift = 9.0f;
  std::vector<float> r = row;
  const float sum = vec::exp_shifted_sum(r.data(), static_cast<int64_t>(r.size()), shift);
  double want_sum = 0;
  for (size_t j = 0; j < row.size(); ++j) {
    const double e = std::exp(static_cast<double>(row[j]) - shift);
    want_sum += e;
    EXPECT_LE(std::abs(r[j] - e), 2e-7 * e) << j;
  }
  EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
  // -inf entries (masked scores) give exactly 0.
  std::vector<float> m{0.0f, -INFINITY, 1.0f};
  vec::exp_shifted_sum(m.data(), 3, 1.0f);
  EXPECT_EQ(m[1], 0.0f);
}

TEST(VecMath, AdamWStepMatchesScalarFormula) {
  const int64_t n = 1001;
  std::vector<double> p(n), g(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::sin(0.1 * i);
    g[i] = std::cos(0.37 * i) * 1e-2;
    m[i] = 1e-3 * std::sin(0.05 * i);
    v[i] = 1e-5 * (1 + std::cos(0.21 * i));
  }
  const vec::AdamWScalars s{3e-3, 0.9, 0.95, 1e-8, 0.1, 1 - std::pow(0.9, 7), 1 - std::pow(0.95, 7)};
  std::vector<float> pf(p.begin(), p.end()), gf(g.begin(), g.end()), mf(m.begin(), m.end()), vf(v.begin(), v.end());
  std::vector<double> pd = p, md = m, vd = v;
  vec::adamw_step(pf.data(), gf.data(), mf.data(), vf.data(), n, s);
  vec::adamw_step(pd.data(), g.data(), md.data(), vd.data(), n, s);
  for (int64_t i = 0; i < n; ++i) {
    const double mm = s.beta1 * m[i] + (1 - s.beta1) * g[i];
    const double vv = s.beta2 * v[i] + (1 - s.beta2) * g[i] * g[i];
    const double pp = p[i] * (1 - s.lr * s.weight_decay) - s.lr * (mm / s.bias1) / (std::sqrt(vv / s.bias2) + s.eps);
    EXPECT_NEAR(md[i], mm, 1e-15);
    EXPECT_NEAR(vd[i], vv, 1e-18);
    EXPECT_NEAR(pd[i], pp, 1e-14);
    EXPECT_NEAR(pf[i], pp, 1e-6);
  }
}

}  // namespace
}  // namespace dtensor::kernels
