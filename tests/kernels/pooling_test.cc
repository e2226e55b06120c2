#include "kernels/cpu/pooling.h"

#include <cmath>
#include <functional>
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
using testing::I;
using testing::expect_same;
using testing::numeric_grad;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr DType kF64 = DType::kFloat64;
using Ints = std::vector<int64_t>;

// ---- Independent references (2-d, over [P, H, W] planes).
// Output count: windows o >= 0 whose extent fits the padded input (floor) or, with ceil_mode,
// that start inside the input or left padding and do not start past the floor-mode overhang.
int64_t ref_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const int64_t eff = (k - 1) * d + 1;
  int64_t n = 0;
  for (int64_t o = 0;; ++o) {
    const bool ok =
        ceil ? (o * s <= in + 2 * p - eff + s - 1 && o * s < in + p) : o * s + eff <= in + 2 * p;
    if (!ok) return n;
    ++n;
  }
}

struct P2 {
  Ints k, s, p, d;
  bool ceil = false;
};

// avg: in-input sum / (override | positions within [-p, in + p) | in-input positions).
Tensor ref_avg2d(const Tensor& x, const P2& c, bool include_pad, std::optional<int64_t> div) {
  const int64_t H = x.size(-2), W = x.size(-1), P = x.numel() / (H * W);
  const int64_t OH = ref_out(H, c.k[0], c.s[0], c.p[0], 1, c.ceil);
  const int64_t OW = ref_out(W, c.k[1], c.s[1], c.p[1], 1, c.ceil);
  std::vector<double> xv = V(x), out;
  for (int64_t b = 0; b < P; ++b)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double sum = 0, cnt = 0, padcnt = 0;
        for (int64_t i = 0; i < c.k[0]; ++i)
          for (int64_t j = 0; j < c.k[1]; ++j) {
            const int64_t r = oh * c.s[0] - c.p[0] + i, q = ow * c.s[1] - c.p[1] + j;
            if (r < H + c.p[0] && q < W + c.p[1]) ++padcnt;
            if (r < 0 || r >= H || q < 0 || q >= W) continue;
            sum += xv[(b * H + r) * W + q];
            ++cnt;
          }
        out.push_back(sum / (div ? static_cast<double>(*div) : include_pad ? padcnt : cnt));
      }
  Shape s = x.sizes();
  s[s.size() - 2] = OH;
  s.back() = OW;
  return T(out, s, kF64);
}

// max: row-major scan of the dilated window; replace on > or NaN; start at the first in-input
// position of each dim.
std::pair<Tensor, Tensor> ref_max2d(const Tensor& x, const P2& c) {
  const int64_t H = x.size(-2), W = x.size(-1), P = x.numel() / (H * W);
  const int64_t OH = ref_out(H, c.k[0], c.s[0], c.p[0], c.d[0], c.ceil);
  const int64_t OW = ref_out(W, c.k[1], c.s[1], c.p[1], c.d[1], c.ceil);
  std::vector<double> xv = V(x), out, idx;
  for (int64_t b = 0; b < P; ++b)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t r0 = oh * c.s[0] - c.p[0], q0 = ow * c.s[1] - c.p[1];
        while (r0 < 0) r0 += c.d[0];
        while (q0 < 0) q0 += c.d[1];
        double best = -kInf;
        int64_t at = r0 * W + q0;
        for (int64_t i = 0; i < c.k[0]; ++i)
          for (int64_t j = 0; j < c.k[1]; ++j) {
            const int64_t r = oh * c.s[0] - c.p[0] + i * c.d[0],
                          q = ow * c.s[1] - c.p[1] + j * c.d[1];
            if (r < 0 || r >= H || q < 0 || q >= W) continue;
            const double v = xv[(b * H + r) * W + q];
            if (std::isnan(v) || v > best) best = v, at = r * W + q;
          }
        out.push_back(best);
        idx.push_back(static_cast<double>(at));
      }
  Shape s = x.sizes();
  s[s.size() - 2] = OH;
  s.back() = OW;
  return {T(out, s, kF64), T(idx, s, DType::kInt64)};
}

// Values on a coarse grid (ties) with some NaNs.
Tensor tie_data(const Shape& s, uint64_t seed, int nan_every = 0) {
  std::vector<double> v = V(rand(s, seed, kF64));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::round(v[i] * 3);
    if (nan_every > 0 && (i * 7 + seed) % nan_every == 0) v[i] = kNaN;
  }
  return T(v, s, kF64);
}

TEST(Pooling, OutputSizeFormula) {
  EXPECT_EQ(pool_output_size({5}, {2}, {}, {0}, {1}, false), Ints{2});
  EXPECT_EQ(pool_output_size({5}, {2}, {}, {0}, {1}, true), Ints{3});
  // ceil_mode would give 3, but the last window would start in the right padding: dropped.
  EXPECT_EQ(pool_output_size({5}, {3}, {3}, {1}, {1}, true), Ints{2});
  EXPECT_EQ(pool_output_size({7, 7}, {3}, {2}, {0}, {2}, false), (Ints{2, 2}));
  EXPECT_EQ(pool_output_size({8, 9}, {3, 2}, {2, 3}, {1, 0}, {}, true), (Ints{5, 3}));
  for (int64_t in = 1; in <= 9; ++in)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t d = 1; d <= 2; ++d)
          for (int64_t p = 0; p <= ((k - 1) * d + 1) / 2; ++p)
            for (bool ceil : {false, true})
              EXPECT_EQ(std::max<int64_t>(pool_output_size({in}, {k}, {s}, {p}, {d}, ceil)[0], 0),
                        ref_out(in, k, s, p, d, ceil))
                  << in << " " << k << " " << s << " " << p << " " << d << " " << ceil;
  expect_error([] { pool_output_size({5}, {3}, {}, {2}, {}, false); },
               {"pool_output_size", "padding 2", "0 .. 1"});
  expect_error([] { pool_output_size({5}, {0}, {}, {}, {}, false); }, {"kernel_size (0)"});
  expect_error(
      [] {
        pool_output_size({5, 5}, {3, 3, 3}, {}, {}, {}, false);
      },
      {"kernel_size has 3 entries", "1 or 2"});
}

TEST(Pooling, AvgPool1dCeilModeAndDivisors) {
  Tensor x = T({1, 2, 3, 4, 5, 6}, {1, 6});
  // Windows start at -1, 1, 3, 5; the last reaches past the right padding: its padded count is 2.
  EXPECT_EQ(V(avg_pool(x, 1, {3}, {2}, {1}, true, true, std::nullopt)),
            (std::vector<double>{1, 3, 5, 3}));
  EXPECT_EQ(V(avg_pool(x, 1, {3}, {2}, {1}, true, false, std::nullopt)),
            (std::vector<double>{1.5, 3, 5, 6}));
  EXPECT_EQ(V(avg_pool(x, 1, {3}, {2}, {1}, true, true, 2)),
            (std::vector<double>{1.5, 4.5, 7.5, 3}));
  EXPECT_EQ(V(avg_pool(x, 1, {3}, {2}, {1}, false, true, std::nullopt)),
            (std::vector<double>{1, 3, 5}));
  EXPECT_EQ(V(avg_pool(T({1, 2, 3, 4, 5}, {1, 1, 5}), 1, {2}, {}, {}, true, true, std::nullopt)),
            (std::vector<double>{1.5, 3.5, 5}));
  // 2-d hand values: iota 4x4, 2x2 windows.
  Tensor q = Tensor::arange(16, kF64).view({1, 4, 4});
  EXPECT_EQ(V(avg_pool(q, 2, {2}, {}, {}, false, true, std::nullopt)),
            (std::vector<double>{2.5, 4.5, 10.5, 12.5}));
  // 3x3, stride 2, pad 1: window (0, 0) holds 0, 1, 4, 5 and 5 padding cells.
  std::vector<double> a = V(avg_pool(q, 2, {3}, {2}, {1}, false, true, std::nullopt));
  std::vector<double> b = V(avg_pool(q, 2, {3}, {2}, {1}, false, false, std::nullopt));
  EXPECT_DOUBLE_EQ(a[0], 10.0 / 9);
  EXPECT_DOUBLE_EQ(b[0], 2.5);
}

TEST(Pooling, AvgPool2dAgainstReference) {
  Tensor x = rand({2, 3, 7, 6}, 61, kF64);
  const std::vector<P2> cfgs = {
      {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},  {{3, 2}, {3, 1}, {1, 1}, {1, 1}, true},
      {{4, 3}, {2, 3}, {2, 0}, {1, 1}, true},  {{1, 5}, {1, 2}, {0, 2}, {1, 1}, false}};
  for (const P2& c : cfgs)
    for (bool include : {false, true})
      for (std::optional<int64_t> div : {std::optional<int64_t>(), std::optional<int64_t>(-3)}) {
        Tensor got = avg_pool(x, 2, c.k, c.s, c.p, c.ceil, include, div);
        Tensor want = ref_avg2d(x, c, include, div);
        ASSERT_EQ(got.sizes(), want.sizes());
        expect_near(V(got), V(want), 1e-14);
      }
  // [C, H, W], float32 and bfloat16, empty batch.
  Tensor y =
      avg_pool(x.select(0, 1).to(DType::kFloat32), 2, {3}, {2}, {1}, true, true, std::nullopt);
  EXPECT_EQ(y.dtype(), DType::kFloat32);
  expect_near(V(y), V(ref_avg2d(x.select(0, 1), {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}, true, {})),
              1e-6);
  EXPECT_EQ(avg_pool(x.to(DType::kBFloat16), 2, {2}, {}, {}, false, true, std::nullopt).dtype(),
            DType::kBFloat16);
  EXPECT_EQ(
      avg_pool(Tensor::zeros({0, 3, 4, 4}), 2, {2}, {}, {}, false, true, std::nullopt).sizes(),
      (Shape{0, 3, 2, 2}));
}

TEST(Pooling, MaxPoolNaNAndTieRules) {
  // Windows of 3, stride 2: [1, 3, 3] -> first 3; [3, NaN, 2] -> NaN; [2, NaN, 0] -> NaN.
  auto [v, i] =
      max_pool_with_indices(T({1, 3, 3, kNaN, 2, kNaN, 0}, {1, 7}), 1, {3}, {2}, {}, {}, false);
  expect_same(V(v), {3, kNaN, kNaN});
  EXPECT_EQ(I(i), (Ints{1, 3, 5}));
  // Several NaNs in one window: the last one wins.
  EXPECT_EQ(I(max_pool_with_indices(T({kNaN, 1, kNaN}, {1, 3}), 1, {3}, {}, {}, {}, false).second),
            (Ints{2}));
  // All -inf: -inf at the window's first in-input position (here after the left padding).
  auto [nv, ni] =
      max_pool_with_indices(T({-kInf, -kInf, -kInf}, {1, 3}), 1, {2}, {2}, {1}, {}, false);
  EXPECT_EQ(V(nv), (std::vector<double>{-kInf, -kInf}));
  EXPECT_EQ(I(ni), (Ints{0, 1}));
  // Dilation 3: windows {0, 3, 6}, {1, 4, 7}, ...
  auto [dv, di] =
      max_pool_with_indices(Tensor::arange(10, kF64).view({1, 10}), 1, {3}, {1}, {}, {3}, false);
  EXPECT_EQ(V(dv), (std::vector<double>{6, 7, 8, 9}));
  EXPECT_EQ(I(di), (Ints{6, 7, 8, 9}));
  // 2-d indices are h * W + w within each plane.
  Tensor x = T({0, 1, 2, 3, 9, 5, 6, 9, 4, 3, 2, 1}, {1, 3, 4});
  auto [v2, i2] = max_pool_with_indices(x, 2, {2}, {1}, {}, {}, false);
  EXPECT_EQ(V(v2), (std::vector<double>{9, 6, 9, 9, 6, 9}));
  EXPECT_EQ(I(i2), (Ints{4, 6, 7, 4, 6, 7}));
}

TEST(Pooling, MaxPool2dAgainstReference) {
  Tensor x = tie_data({2, 2, 7, 8}, 62, 13);
  const std::vector<P2> cfgs = {{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
                                {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
                                {{3, 2}, {1, 2}, {1, 1}, {2, 1}, false},
                                {{3, 3}, {3, 2}, {2, 1}, {2, 3}, true},
                                {{2, 4}, {2, 3}, {1, 2}, {1, 1}, true}};
  for (const P2& c : cfgs) {
    auto [v, i] = max_pool_with_indices(x, 2, c.k, c.s, c.p, c.d, c.ceil);
    auto [wv, wi] = ref_max2d(x, c);
    ASSERT_EQ(v.sizes(), wv.sizes());
    expect_same(V(v), V(wv));
    EXPECT_EQ(I(i), I(wi));
  }
}

TEST(Pooling, Pool1dAnd3dAgreeWith2d) {
  // 1-d pooling is 2-d pooling with a 1-row kernel over H = 1.
  Tensor x1 = tie_data({2, 3, 9}, 63, 11);
  auto [a, ai] = max_pool_with_indices(x1, 1, {3}, {2}, {1}, {2}, true);
  auto [b, bi] = max_pool_with_indices(x1.unsqueeze(2), 2, {1, 3}, {1, 2}, {0, 1}, {1, 2}, true);
  EXPECT_TRUE(equal(a, b.squeeze(2)));
  EXPECT_TRUE(equal(ai, bi.squeeze(2)));
  EXPECT_TRUE(equal(
      avg_pool(x1, 1, {4}, {3}, {2}, true, true, std::nullopt),
      avg_pool(x1.unsqueeze(2), 2, {1, 4}, {1, 3}, {0, 2}, true, true, std::nullopt).squeeze(2)));
  // 3-d pooling with a depth kernel of 1 is 2-d pooling of each depth slice; indices gain d*H*W.
  Tensor x3 = tie_data({2, 3, 5, 6}, 64, 7);  // [C, D, H, W]
  auto [v3, i3] = max_pool_with_indices(x3, 3, {1, 3, 2}, {1, 2, 2}, {0, 1, 1}, {}, true);
  std::vector<int64_t> i3v = I(i3), want;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t d = 0; d < 3; ++d) {
      auto [v2, i2] = max_pool_with_indices(x3.select(0, c).select(0, d).unsqueeze(0), 2, {3, 2},
                                            {2, 2}, {1, 1}, {}, true);
      expect_same(V(v3.select(0, c).select(0, d)), V(v2));
      for (int64_t e : I(i2)) want.push_back(d * 30 + e);
    }
  EXPECT_EQ(i3v, want);
  Tensor r3 = rand({2, 3, 5, 6}, 65, kF64);
  Tensor avg3 = avg_pool(r3, 3, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, true, false, std::nullopt);
  for (int64_t d = 0; d < 3; ++d)
    expect_near(V(avg3.select(1, d)),
                V(avg_pool(r3.select(1, d), 2, {3}, {2}, {1}, true, false, std::nullopt)), 1e-15);
}

TEST(Pooling, AdaptiveAvgPool2d) {
  // 5 -> 3 windows: [0, 2), [1, 4), [3, 5).
  Tensor x = T({1, 2, 3, 4, 5}, {1, 5, 1});
  EXPECT_EQ(V(adaptive_avg_pool(x, 2, {3, 1})), (std::vector<double>{1.5, 3, 4.5}));
  EXPECT_EQ(adaptive_pool_input_range(1, 2, 5, 3), (std::pair<int64_t, int64_t>{1, 4}));
  // Divisible sizes: plain average pooling.
  Tensor y = rand({2, 3, 8, 6}, 66, kF64);
  expect_near(V(adaptive_avg_pool(y, 2, {4, 3})),
              V(avg_pool(y, 2, {2}, {}, {}, false, true, std::nullopt)), 1e-15);
  EXPECT_EQ(adaptive_avg_pool(y, 2, {3}).sizes(), (Shape{2, 3, 3, 3}));
  // Upsampling windows repeat elements: 2 -> 3 gives [0, 1), [0, 2), [1, 2).
  EXPECT_EQ(V(adaptive_avg_pool(T({2, 4}, {1, 1, 2}), 2, {1, 3})), (std::vector<double>{2, 3, 4}));
  expect_error([&] { adaptive_avg_pool(y, 2, {1, 2, 3}); }, {"adaptive_avg_pool2d", "output_size"});
}

TEST(Pooling, AdaptiveAvgPool1dAnd3d) {
  // 1-d, 5 -> 3 windows [0, 2), [1, 4), [3, 5), by hand; 3-d over [2, 2, 2] holding 0..7.
  EXPECT_EQ(V(adaptive_avg_pool(T({1, 2, 3, 4, 5}, {1, 5}), 1, {3})), (std::vector<double>{1.5, 3, 4.5}));
  Tensor z = T({0, 1, 2, 3, 4, 5, 6, 7}, {1, 2, 2, 2});
  EXPECT_EQ(V(adaptive_avg_pool(z, 3, {1})), (std::vector<double>{3.5}));
  EXPECT_EQ(V(adaptive_avg_pool(z, 3, {2, 1, 1})), (std::vector<double>{1.5, 5.5}));
  EXPECT_EQ(V(adaptive_avg_pool(z, 3, {1, 1, 2})), (std::vector<double>{3, 4}));
  // The gradient spreads grad / window size over each window (windows [0, 2), [1, 4), [3, 5)).
  EXPECT_EQ(V(adaptive_avg_pool_backward(T({2, 3, 4}, {1, 3}), {1, 5}, 1)),
            (std::vector<double>{1, 2, 1, 3, 2}));
  expect_error([&] { adaptive_avg_pool(z, 3, {1, 2}); }, {"adaptive_avg_pool3d", "output_size"});
}

TEST(Pooling, BackwardAgainstFiniteDifferences) {
  struct Case {
    Shape shape;
    int dims;
    Ints k, s, p, d;
    bool ceil, include;
    std::optional<int64_t> div;
  };
  const std::vector<Case> cases = {
      {{2, 7}, 1, {3}, {2}, {1}, {2}, true, true, std::nullopt},
      {{1, 2, 5, 6}, 2, {3, 2}, {2, 1}, {1, 1}, {1, 2}, true, false, std::nullopt},
      {{1, 2, 5, 6}, 2, {3}, {2}, {1}, {1}, false, true, 4},
      {{1, 4, 5, 5}, 3, {2, 3, 2}, {2, 2, 1}, {1, 1, 0}, {1, 2, 1}, true, true, std::nullopt}};
  uint64_t seed = 70;
  for (const Case& c : cases) {
    Tensor x = rand(c.shape, ++seed, kF64);  // distinct values
    Tensor y = avg_pool(x, c.dims, c.k, c.s, c.p, c.ceil, c.include, c.div);
    Tensor w = rand(y.sizes(), ++seed, kF64);
    expect_near(V(avg_pool_backward(w, x, c.dims, c.k, c.s, c.p, c.ceil, c.include, c.div)),
                numeric_grad(x, w,
                             [&](const Tensor& t) {
                               return avg_pool(t, c.dims, c.k, c.s, c.p, c.ceil, c.include, c.div);
                             }),
                1e-8);
    auto [m, mi] = max_pool_with_indices(x, c.dims, c.k, c.s, c.p, c.d, c.ceil);
    Tensor wm = rand(m.sizes(), ++seed, kF64);
    expect_near(
        V(max_pool_backward(wm, mi, x.sizes(), c.dims)),
        numeric_grad(x, wm,
                     [&](const Tensor& t) {
                       return max_pool_with_indices(t, c.dims, c.k, c.s, c.p, c.d, c.ceil).first;
                     }),
        1e-8);
  }
  Tensor x = rand({2, 5, 7}, 80, kF64), w = rand({2, 3, 4}, 81, kF64);
  expect_near(V(adaptive_avg_pool_backward(w, x.sizes(), 2)),
              numeric_grad(x, w,
                           [](const Tensor& t) {
                             return adaptive_avg_pool(t, 2, {3, 4});
                           }),
              1e-8);
  // Overlapping max windows accumulate on a shared maximum.
  Tensor t = T({0, 5, 0}, {1, 3});
  auto [v, i] = max_pool_with_indices(t, 1, {2}, {1}, {}, {}, false);
  EXPECT_EQ(V(max_pool_backward(T({1, 2}, {1, 2}), i, t.sizes(), 1)),
            (std::vector<double>{0, 3, 0}));
  EXPECT_EQ(avg_pool_backward(T({1, 2}, {1, 2}, DType::kBFloat16), t, 1, {2}, {1}, {}, false, true,
                              std::nullopt)
                .dtype(),
            DType::kBFloat16);
}

// Adds part into acc's region [lo[k], lo[k] + part.size) along the given tensor dims.
void add_region(Tensor& acc, const Tensor& part, const std::vector<int64_t>& dims, const Ints& lo) {
  Tensor view = acc;
  for (size_t j = 0; j < dims.size(); ++j) view = view.narrow(dims[j], lo[j], part.size(dims[j]));
  std::vector<double> a = V(view), b = V(part);
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  view.copy_(T(a, view.sizes(), kF64));
}

// Tiles the output of a pooling op along `sharded` spatial dims into `chunks` pieces each, runs
// each tile on the input slab it needs (plus `halo` extra rows where they exist), and checks the
// tiles against the global forward and the summed slab gradients against the global backward.
enum class Op { kAvg, kMax, kAdaptive };
void check_slabs(Op op, const Tensor& x, int dims, Ints k, Ints s, Ints p, Ints d, bool ceil,
                 bool include, std::optional<int64_t> div, const std::vector<int>& sharded,
                 int chunks, int64_t halo = 0, Ints adaptive_out = {}) {
  const int64_t lead = x.dim() - dims;
  auto fwd = [&](const Tensor& in, const std::vector<PoolSlab>& sl) -> std::pair<Tensor, Tensor> {
    if (op == Op::kAvg) return {avg_pool(in, dims, k, s, p, ceil, include, div, sl), Tensor()};
    if (op == Op::kMax) return max_pool_with_indices(in, dims, k, s, p, d, ceil, sl);
    return {adaptive_avg_pool(in, 2, adaptive_out, sl), Tensor()};
  };
  auto [y, yi] = fwd(x, {});
  Tensor g = rand(y.sizes(), 90, kF64);
  Tensor want_grad = op == Op::kAvg   ? avg_pool_backward(g, x, dims, k, s, p, ceil, include, div)
                     : op == Op::kMax ? max_pool_backward(g, yi, x.sizes(), dims)
                                      : adaptive_avg_pool_backward(g, x.sizes(), 2);
  Tensor acc = Tensor::zeros(x.sizes(), kF64);
  std::vector<int64_t> tdims;
  for (int sd : sharded) tdims.push_back(lead + sd);
  const int64_t tiles = static_cast<int64_t>(std::pow(chunks, sharded.size()));
  for (int64_t tile = 0; tile < tiles; ++tile) {
    std::vector<PoolSlab> slabs;
    Ints lo, olo;
    Tensor in = x, want = y, wanti = yi, gt = g;
    int64_t rest = tile;
    for (size_t j = 0; j < sharded.size(); ++j) {
      const int sd = sharded[j];
      const int64_t c = rest % chunks, O = y.size(tdims[j]), G = x.size(tdims[j]);
      rest /= chunks;
      const int64_t os = O * c / chunks, oe = O * (c + 1) / chunks;
      auto pick = [&](const Ints& v, int64_t dflt) {
        return v.empty() ? dflt : v.size() == 1 ? v[0] : v[sd];
      };
      const int64_t kk = pick(k, 1);
      auto [a, b] = op == Op::kAdaptive
                        ? adaptive_pool_input_range(os, oe, G, O)
                        : pool_input_range(os, oe, G, kk, pick(s, kk), pick(p, 0), pick(d, 1));
      a = std::max<int64_t>(0, a - halo), b = std::min(G, b + halo);
      in = in.narrow(tdims[j], a, b - a);
      want = want.narrow(tdims[j], os, oe - os);
      gt = gt.narrow(tdims[j], os, oe - os);
      if (wanti.defined()) wanti = wanti.narrow(tdims[j], os, oe - os);
      slabs.push_back({sd, G, a, os, oe, op == Op::kAdaptive ? O : -1});
      lo.push_back(a);
    }
    auto [got, goti] = fwd(in, slabs);
    ASSERT_EQ(got.sizes(), want.sizes()) << "tile " << tile;
    EXPECT_TRUE(equal(got, want.contiguous())) << "tile " << tile;
    if (op == Op::kMax) {
      EXPECT_TRUE(equal(goti, wanti.contiguous())) << "tile " << tile;
    }
    Tensor part = op == Op::kAvg
                      ? avg_pool_backward(gt, in, dims, k, s, p, ceil, include, div, slabs)
                  : op == Op::kMax ? max_pool_backward(gt, goti, in.sizes(), dims, slabs)
                                   : adaptive_avg_pool_backward(gt, in.sizes(), 2, slabs);
    ASSERT_EQ(part.sizes(), in.sizes());
    add_region(acc, part, tdims, lo);
  }
  expect_near(V(acc), V(want_grad), 1e-12);
}

TEST(Pooling, SlabsReproduceTheGlobalOp) {
  Tensor x2 = tie_data({2, 2, 11, 9}, 91, 17);
  Tensor r2 = rand({2, 2, 11, 9}, 92, kF64);
  for (int chunks : {2, 3, 4}) {
    check_slabs(Op::kMax, x2, 2, {3}, {2}, {1}, {1}, true, false, {}, {0}, chunks);
    check_slabs(Op::kMax, x2, 2, {3, 2}, {1, 2}, {1, 1}, {2, 1}, false, false, {}, {0, 1}, chunks);
    check_slabs(Op::kAvg, r2, 2, {3}, {2}, {1}, {}, true, true, {}, {0}, chunks);
    check_slabs(Op::kAvg, r2, 2, {4, 3}, {3, 2}, {2, 1}, {}, true, false, {}, {0, 1}, chunks);
    check_slabs(Op::kAvg, r2, 2, {2}, {}, {}, {}, false, true, 3, {1}, chunks, /*halo=*/2);
    check_slabs(Op::kAdaptive, r2, 2, {}, {}, {}, {}, false, false, {}, {0, 1}, chunks, 0, {4, 5});
  }
  Tensor x1 = tie_data({3, 23}, 93, 5);
  check_slabs(Op::kMax, x1, 1, {4}, {3}, {2}, {2}, true, false, {}, {0}, 5);
  check_slabs(Op::kAvg, rand({3, 23}, 94, kF64), 1, {5}, {2}, {2}, {}, true, true, {}, {0}, 4);
  Tensor x3 = rand({1, 2, 9, 6, 5}, 95, kF64);
  check_slabs(Op::kMax, x3, 3, {3, 2, 2}, {2, 2, 1}, {1, 1, 1}, {1, 1, 2}, true, false, {}, {0}, 3);
  check_slabs(Op::kAvg, x3, 3, {3, 2, 2}, {2}, {1, 0, 1}, {}, true, true, {}, {0, 2}, 2);
}

TEST(Pooling, SlabErrors) {
  Tensor x = rand({1, 10, 4}, 96, kF64);
  // Output rows [2, 4) of a k3 s2 p1 pool read input rows [3, 8); a slab of rows [4, 8) is short.
  EXPECT_EQ(pool_input_range(2, 4, 10, 3, 2, 1), (std::pair<int64_t, int64_t>{3, 8}));
  expect_error(
      [&] {
        avg_pool(x.narrow(1, 4, 4), 2, {3}, {2}, {1}, false, true, std::nullopt,
                 {PoolSlab{0, 10, 4, 2, 4}});
      },
      {"avg_pool", "read input rows [3, 8)", "slab holds rows [4, 8)"});
  expect_error(
      [&] {
        avg_pool(x.narrow(1, 3, 5), 2, {3}, {2}, {1}, false, true, std::nullopt,
                 {PoolSlab{0, 10, 3, 2, 9}});
      },
      {"avg_pool", "[2, 9)", "[0, 5)"});
  expect_error(
      [&] {
        max_pool_with_indices(x, 2, {2}, {}, {}, {}, false, {PoolSlab{2, 10, 0, 0, 1}});
      },
      {"max_pool_with_indices", "slab dim 2"});
  expect_error(
      [&] {
        max_pool_backward(T({1}, {1, 1, 1}), T({39}, {1, 1, 1}, DType::kInt64), {1, 4, 4}, 2,
                          {PoolSlab{0, 10, 4}});
      },
      {"max_pool_backward", "index 39"});
  expect_error(
      [&] {
        adaptive_avg_pool_backward(T({1, 1}, {1, 1, 2}), {1, 4, 4}, 2, {PoolSlab{0, 10, 0, 0, 1}});
      },
      {"adaptive_avg_pool2d_backward", "output_size"});
}

TEST(Pooling, Errors) {
  Tensor x = rand({1, 2, 5, 5}, 97);
  expect_error([&] { avg_pool(x, 2, {3}, {}, {2}, false, true, std::nullopt); },
               {"avg_pool", "padding 2", "half"});
  expect_error([&] { max_pool_with_indices(x, 2, {7}, {}, {}, {}, false); },
               {"max_pool_with_indices", "output size is too small"});
  expect_error([&] { avg_pool(x, 2, {2}, {}, {}, false, true, 0); }, {"divisor_override"});
  expect_error([&] { avg_pool(x, 1, {2}, {}, {}, false, true, std::nullopt); },
               {"avg_pool", "1 spatial dims", "[1, 2, 5, 5]"});
  expect_error([&] { avg_pool(x.to(DType::kInt64), 2, {2}, {}, {}, false, true, std::nullopt); },
               {"avg_pool", "int64"});
  expect_error(
      [&] {
        avg_pool(rand({1, 2, 3, 3}, 98), 3, {3, 1, 1}, {1}, {1, 0, 0}, false, true, std::nullopt);
      },
      {"avg_pool", "smaller than the kernel size"});
  expect_error(
      [&] {
        max_pool_with_indices(Tensor::zeros({1, 0, 4, 4}), 2, {2}, {}, {}, {}, false);
      },
      {"non-zero channel and spatial sizes"});
  // Dilation widens the padding limit for 2-d max pooling, not for 3-d.
  EXPECT_EQ(max_pool_with_indices(x, 2, {3}, {1}, {2}, {2}, false).first.sizes(),
            (Shape{1, 2, 5, 5}));
  expect_error(
      [&] {
        max_pool_with_indices(rand({1, 5, 5, 5}, 99), 3, {3}, {1}, {2}, {2}, false);
      },
      {"padding 2", "kernel size 3"});
}

}  // namespace
}  // namespace dtensor::kernels
