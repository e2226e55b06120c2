#include "kernels/cpu/attention.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>

#include "gtest/gtest.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::expect_near;
using testing::rand;
using testing::T;
using testing::V;
constexpr DType kF64 = DType::kFloat64;

// Naive reference in double: every (batch, i, j) score, a softmax per row (fully masked rows give
// zeros), then the weighted sum of value rows. mask: broadcast to [B, L, S] already (or empty).
struct Ref {
  std::vector<double> q, k, v;
  int64_t B, L, S, E, Ev;
  double scale;
  bool causal = false;
  std::vector<double> mask_add;   // B*L*S, added (may hold -inf)
};

std::vector<double> ref_attention(const Ref& r) {
  std::vector<double> out(r.B * r.L * r.Ev, 0.0);
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < r.B; ++b)
    for (int64_t i = 0; i < r.L; ++i) {
      std::vector<double> s(r.S);
      double mx = ninf;
      for (int64_t j = 0; j < r.S; ++j) {
        double d = 0;
        for (int64_t e = 0; e < r.E; ++e) d += r.q[(b * r.L + i) * r.E + e] * r.k[(b * r.S + j) * r.E + e];
        s[j] = d * r.scale;
        if (!r.mask_add.empty()) s[j] += r.mask_add[(b * r.L + i) * r.S + j];
        if (r.causal && j > i) s[j] = ninf;
        mx = std::max(mx, s[j]);
      }
      if (mx == ninf) continue;
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < r.S; ++j)
        for (int64_t e = 0; e < r.Ev; ++e)
          out[(b * r.L + i) * r.Ev + e] += s[j] / sum * r.v[(b * r.S + j) * r.Ev + e];
    }
  return out;
}

Ref make_ref(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  Ref r;
  r.q = V(q);
  r.k = V(k);
  r.v = V(v);
  r.E = q.size(-1);
  r.L = q.size(-2);
  r.S = k.size(-2);
  r.Ev = v.size(-1);
  r.B = q.numel() / std::max<int64_t>(r.L * r.E, 1);
  r.scale = scale;
  r.causal = causal;
  return r;
}

TEST(Attention, MatchesNaiveReference) {
  const Tensor q = rand({2, 3, 5, 4}, 1, kF64), k = rand({2, 3, 7, 4}, 2, kF64),
               v = rand({2, 3, 7, 6}, 3, kF64);
  Tensor out = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 5, 6}));
  expect_near(V(out), ref_attention(make_ref(q, k, v, 0.5, false)), 1e-12);
  // Explicit scale.
  expect_near(V(scaled_dot_product_attention(q, k, v, std::nullopt, false, 1.7)),
              ref_attention(make_ref(q, k, v, 1.7, false)), 1e-12);
}

TEST(Attention, CausalIsTopLeftAligned) {
  for (auto [L, S] : {std::pair<int64_t, int64_t>{6, 6}, {5, 8}, {8, 5}, {130, 70}}) {
    const Tensor q = rand({2, L, 3}, 4, kF64), k = rand({2, S, 3}, 5, kF64), v = rand({2, S, 2}, 6, kF64);
    Tensor out = scaled_dot_product_attention(q, k, v, std::nullopt, true);
    expect_near(V(out), ref_attention(make_ref(q, k, v, 1 / std::sqrt(3.0), true)), 1e-12);
  }
}

TEST(Attention, BoolAndFloatMasksBroadcast) {
  const int64_t B = 2, H = 3, L = 5, S = 6;
  const Tensor q = rand({B, H, L, 4}, 7, kF64), k = rand({B, H, S, 4}, 8, kF64),
               v = rand({B, H, S, 3}, 9, kF64);
  // Bool mask [L, S] broadcast over batch and heads; row 2 fully masked gives zeros.
  std::vector<bool> bits(L * S);
  std::vector<double> bv(L * S);
  for (int64_t i = 0; i < L * S; ++i) bv[i] = bits[i] = ((i * 7) % 3) != 0 && i / S != 2;
  Tensor bmask = T(bv, {L, S}).to(DType::kBool);
  Ref r = make_ref(q, k, v, 0.5, false);
  r.mask_add.resize(B * H * L * S);
  for (int64_t b = 0; b < B * H; ++b)
    for (int64_t i = 0; i < L * S; ++i)
      r.mask_add[b * L * S + i] = bits[i] ? 0.0 : -std::numeric_limits<double>::infinity();
  std::vector<double> got = V(scaled_dot_product_attention(q, k, v, bmask));
  expect_near(got, ref_attention(r), 1e-12);
  for (int64_t b = 0; b < B * H; ++b)
    for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(got[(b * L + 2) * 3 + e], 0.0);
  // Float mask [B, 1, L, S] added.
  Tensor fmask = rand({B, 1, L, S}, 10, kF64);
  std::vector<double> fm = V(fmask);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L * S; ++i) r.mask_add[((b * H + h) * L * S) + i] = fm[b * L * S + i];
  expect_near(V(scaled_dot_product_attention(q, k, v, fmask)), ref_attention(r), 1e-12);
}

TEST(Attention, LowPrecisionDtypesComputeInFloat) {
  const Tensor q = rand({3, 70, 16}, 11, kF64), k = rand({3, 90, 16}, 12, kF64), v = rand({3, 90, 8}, 13, kF64);
  std::vector<double> want = ref_attention(make_ref(q, k, v, 0.25, true));
  for (auto [dt, tol] : {std::pair{DType::kFloat32, 1e-5}, {DType::kBFloat16, 2e-2}, {DType::kFloat16, 2e-3}}) {
    // Inputs rounded to dt: compare with the reference on the rounded inputs.
    Tensor qd = q.to(dt), kd = k.to(dt), vd = v.to(dt);
    Tensor out = scaled_dot_product_attention(qd, kd, vd, std::nullopt, true);
    EXPECT_EQ(out.dtype(), dt);
    expect_near(V(out), ref_attention(make_ref(qd, kd, vd, 0.25, true)), tol);
  }
}

TEST(Attention, QueryOffsetGivesTheRowsOfTheWhole) {
  const Tensor q = rand({2, 150, 8}, 14, kF64), k = rand({2, 150, 8}, 15), v = rand({2, 150, 5}, 16);
  const Tensor qf = q.to(DType::kFloat32);
  Tensor whole = scaled_dot_product_attention(qf, k, v, std::nullopt, true);
  for (auto [lo, len] : {std::pair<int64_t, int64_t>{0, 37}, {37, 80}, {117, 33}}) {
    Tensor part = scaled_dot_product_attention(qf.narrow(1, lo, len), k, v, std::nullopt, true, std::nullopt, lo);
    expect_near(V(part), V(whole.narrow(1, lo, len)), 1e-6);
  }
  // Empty query rows.
  Tensor none = scaled_dot_product_attention(qf.narrow(1, 0, 0), k, v, std::nullopt, true, std::nullopt, 5);
  EXPECT_EQ(none.sizes(), (Shape{2, 0, 5}));
}

// Central finite differences of sum(out * W) in float64 against the analytic backward.
void check_gradients(const Shape& qs, int64_t S, int64_t Ev, bool causal,
                     const std::optional<Tensor>& mask, std::optional<double> scale) {
  Shape ks = qs, vs = qs;
  ks[ks.size() - 2] = S;
  vs[vs.size() - 2] = S;
  vs.back() = Ev;
  Tensor q = rand(qs, 21, kF64), k = rand(ks, 22, kF64), v = rand(vs, 23, kF64);
  Tensor out = scaled_dot_product_attention(q, k, v, mask, causal, scale);
  Tensor w = rand(out.sizes(), 24, kF64);
  AttentionGrads g = scaled_dot_product_attention_backward(w, q, k, v, out, causal, scale, mask);
  auto loss = [&](const Tensor& q2, const Tensor& k2, const Tensor& v2) {
    std::vector<double> o = V(scaled_dot_product_attention(q2, k2, v2, mask, causal, scale)), wv = V(w);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * wv[i];
    return s;
  };
  const double h = 1e-6;
  for (int which = 0; which < 3; ++which) {
    Tensor x = which == 0 ? q : which == 1 ? k : v;
    std::vector<double> xv = V(x), num(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      std::vector<double> p = xv, m = xv;
      p[i] += h;
      m[i] -= h;
      Tensor tp = T(p, x.sizes(), kF64), tm = T(m, x.sizes(), kF64);
      double lp = which == 0 ? loss(tp, k, v) : which == 1 ? loss(q, tp, v) : loss(q, k, tp);
      double lm = which == 0 ? loss(tm, k, v) : which == 1 ? loss(q, tm, v) : loss(q, k, tm);
      num[i] = (lp - lm) / (2 * h);
    }
    const Tensor& an = which == 0 ? g.query : which == 1 ? g.key : g.value;
    EXPECT_EQ(an.sizes(), x.sizes());
    SCOPED_TRACE(which);
    expect_near(V(an), num, 1e-7);
  }
}

TEST(AttentionBackward, MatchesFiniteDifferences) {
  check_gradients({2, 5, 3}, 7, 4, false, std::nullopt, std::nullopt);
  check_gradients({2, 2, 6, 3}, 4, 2, true, std::nullopt, 0.8);
  check_gradients({1, 7, 2}, 5, 3, true, std::nullopt, std::nullopt);  // L > S
  // Masks (the kernel takes them; the op schema has is_causal only).
  std::vector<double> bits(5 * 7);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = (i % 4) != 1 && i / 7 != 3;  // row 3 fully masked
  check_gradients({2, 5, 3}, 7, 4, false, T(bits, {5, 7}).to(DType::kBool), std::nullopt);
  check_gradients({2, 5, 3}, 7, 4, false, rand({1, 5, 7}, 30, kF64), std::nullopt);
}

TEST(AttentionBackward, QueryRowsSplitSumToKeyAndValueGradients) {
  const Tensor q = rand({2, 100, 8}, 31, kF64), k = rand({2, 90, 8}, 32, kF64), v = rand({2, 90, 4}, 33, kF64);
  Tensor out = scaled_dot_product_attention(q, k, v, std::nullopt, true);
  Tensor g = rand(out.sizes(), 34, kF64);
  AttentionGrads whole = scaled_dot_product_attention_backward(g, q, k, v, out, true);
  std::vector<double> dk(V(whole.key).size(), 0.0), dv(V(whole.value).size(), 0.0);
  for (auto [lo, len] : {std::pair<int64_t, int64_t>{0, 41}, {41, 0}, {41, 59}}) {
    AttentionGrads part = scaled_dot_product_attention_backward(
        g.narrow(1, lo, len), q.narrow(1, lo, len), k, v, out.narrow(1, lo, len), true, std::nullopt,
        std::nullopt, lo);
    expect_near(V(part.query), V(whole.query.narrow(1, lo, len)), 1e-12);
    std::vector<double> pk = V(part.key), pv = V(part.value);
    for (size_t i = 0; i < dk.size(); ++i) dk[i] += pk[i];
    for (size_t i = 0; i < dv.size(); ++i) dv[i] += pv[i];
  }
  expect_near(dk, V(whole.key), 1e-12);
  expect_near(dv, V(whole.value), 1e-12);
}

TEST(Attention, Errors) {
  const Tensor q = rand({2, 5, 4}, 1), k = rand({2, 7, 4}, 2), v = rand({2, 7, 3}, 3);
  expect_error([&] { scaled_dot_product_attention(q, rand({2, 7, 5}, 2), v); }, {"scaled_dot_product_attention", "[2, 7, 5]"});
  expect_error([&] { scaled_dot_product_attention(q, rand({3, 7, 4}, 2), v); }, {"batch dims differ"});
  expect_error([&] { scaled_dot_product_attention(q, k.to(kF64), v); }, {"one floating dtype"});
  expect_error([&] { scaled_dot_product_attention(q, k, v, rand({5, 7}, 4).to(DType::kBool), true); },
               {"exclusive"});
  expect_error([&] { scaled_dot_product_attention(q, k, v, rand({5, 7}, 4).to(DType::kInt64)); },
               {"bool or floating"});
  expect_error([&] { scaled_dot_product_attention(q, k, v, rand({4, 7}, 4)); }, {"does not broadcast"});
  expect_error([&] { scaled_dot_product_attention_backward(rand({2, 5, 4}, 5), q, k, v, rand({2, 5, 3}, 6)); },
               {"grad_out", "[2, 5, 4]"});
}

// L = S = 256, E = 64 (one head): a few ms forward and backward in an optimized build.
TEST(Attention, SpeedOfOneHead) {
  const Tensor q = rand({4, 256, 64}, 41), k = rand({4, 256, 64}, 42), v = rand({4, 256, 64}, 43);
  Tensor out = scaled_dot_product_attention(q, k, v);  // warm-up
  auto t0 = std::chrono::steady_clock::now();
  out = scaled_dot_product_attention(q, k, v, std::nullopt, true);
  auto t1 = std::chrono::steady_clock::now();
  AttentionGrads g = scaled_dot_product_attention_backward(out, q, k, v, out, true);
  auto t2 = std::chrono::steady_clock::now();
  const double fwd = std::chrono::duration<double, std::milli>(t1 - t0).count() / 4;
  const double bwd = std::chrono::duration<double, std::milli>(t2 - t1).count() / 4;
  std::cout << "attention L=S=256 E=64 float32, per head: forward " << fwd << " ms, backward " << bwd
            << " ms\n";
  EXPECT_LT(fwd, 50.0);
  EXPECT_LT(bwd, 100.0);
}

}  // namespace
}  // namespace dtensor::kernels
