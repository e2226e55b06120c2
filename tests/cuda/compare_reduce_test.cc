// CUDA comparisons, where / masked_fill, pow, gelu_backward and the prod / var / std / logsumexp
// reductions against the CPU kernels on the same data.
#include <functional>
#include <limits>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace dtensor::cuda::testing {
namespace {

namespace K = ::dtensor::kernels;
namespace C = ::dtensor::kernels::cuda;
using K::Scalar;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const DType kFloats[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};

// Runs f and expects a dtensor::Error whose message contains `part`.
template <typename F>
void expect_error(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Multiples of 0.25 in [-2, 2), so that comparisons see many ties.
Tensor coarse(const Shape& s, uint64_t seed, DType dt) {
  return K::div(randint(s, seed, 16, DType::kFloat64), 4.0).to(dt);
}

using TT = std::function<Tensor(const Tensor&, const Tensor&)>;
using TS = std::function<Tensor(const Tensor&, const Scalar&)>;

struct Comparison {
  const char* name;
  TT cuda, cpu;
  TS cuda_s, cpu_s;
};

#define DT_COMPARISON(fn)                                                       \
  Comparison {                                                                  \
#fn, [](const Tensor& a, const Tensor& b) { return C::fn(a, b); },            \
        [](const Tensor& a, const Tensor& b) { return K::fn(a, b); },             \
        [](const Tensor& a, const Scalar& b) { return C::fn(a, b); },             \
        [](const Tensor& a, const Scalar& b) { return K::fn(a, b); } \
  }

using Compare = CudaTest;

TEST_F(Compare, ComparisonsBroadcastPromoteAndHandleNaN) {
  const Comparison ops[] = {DT_COMPARISON(eq), DT_COMPARISON(ne), DT_COMPARISON(lt),
                            DT_COMPARISON(le), DT_COMPARISON(gt), DT_COMPARISON(ge)};
  Tensor a = K::sub(coarse({4, 1, 6}, 1, DType::kFloat32), 2.0);
  Tensor b = K::sub(coarse({5, 1}, 2, DType::kBFloat16), 2.0);
  Tensor at = a.transpose(0, 2);  // [6, 1, 4], strided
  Tensor i = randint({6, 3}, 3, 5, DType::kInt64), j = randint({3}, 4, 5, DType::kInt32);
  Tensor n = Tensor::from_vector<double>({1, kNaN, 3, -kInf, kNaN, 0, kInf}, {7});
  Tensor m = Tensor::from_vector<double>({kNaN, 2, 3, -kInf, kNaN, -0.0, 1}, {7});
  Tensor t = Tensor::from_vector<bool>({true, false, true, false}, {4});
  Tensor u = Tensor::from_vector<bool>({true, true, false, false}, {4});
  Tensor zd = Tensor::full({}, 0.3, DType::kFloat64);  // 0-d float64: compared in float32
  Tensor h = coarse({3, 5}, 5, DType::kFloat16);
  for (const Comparison& op : ops) {
    const std::string w = op.name;
    expect_matches(op.cuda(G(a), G(b)), op.cpu(a, b), 0, w + " float32/bfloat16 broadcast");
    expect_matches(op.cuda(G(a).transpose(0, 2), G(b.view({1, 5, 1}))),
                   op.cpu(at, b.view({1, 5, 1})), 0, w + " strided");
    expect_matches(op.cuda(G(i), G(j)), op.cpu(i, j), 0, w + " int64/int32");
    expect_matches(op.cuda(G(j), G(b.view({5, 1}))), op.cpu(j, b.view({5, 1})), 0,
                   w + " int32/bfloat16");
    expect_matches(op.cuda(G(h), G(b.view({5}))), op.cpu(h, b.view({5})), 0,
                   w + " float16/bfloat16");
    expect_matches(op.cuda(G(n), G(m)), op.cpu(n, m), 0, w + " NaN/inf float64");
    expect_matches(op.cuda(G(n.to(DType::kBFloat16)), G(m)), op.cpu(n.to(DType::kBFloat16), m), 0,
                   w + " NaN bfloat16/float64");
    expect_matches(op.cuda(G(t), G(u)), op.cpu(t, u), 0, w + " bool");
    expect_matches(op.cuda(G(a), G(zd)), op.cpu(a, zd), 0, w + " 0-d");
    expect_matches(op.cuda(G(zd), G(i)), op.cpu(zd, i), 0, w + " 0-d float, int tensor");
    expect_matches(op.cuda_s(G(a), 0.25), op.cpu_s(a, 0.25), 0, w + " float scalar");
    expect_matches(op.cuda_s(G(i), 2), op.cpu_s(i, 2), 0, w + " int scalar");
    expect_matches(op.cuda_s(G(i), 2.5), op.cpu_s(i, 2.5), 0, w + " int tensor, float scalar");
    expect_matches(op.cuda_s(G(n), kNaN), op.cpu_s(n, kNaN), 0, w + " NaN scalar");
    expect_matches(op.cuda_s(G(t), true), op.cpu_s(t, true), 0, w + " bool scalar");
    expect_matches(op.cuda(G(Tensor::zeros({0, 3})), G(j)), op.cpu(Tensor::zeros({0, 3}), j), 0,
                   w + " empty");
    expect_error([&] { op.cuda(G(a), G(rand({4}, 6))); },
                 std::string(op.name) + ": shapes [4, 1, 6] and [4] do not broadcast");
  }
}

TEST_F(Compare, WhereAndMaskedFill) {
  Tensor cond = K::gt(rand({4, 1, 6}, 10), 0.0);
  Tensor a = rand({5, 1}, 11, DType::kFloat32), b = rand({6}, 12, DType::kBFloat16);
  expect_matches(C::where(G(cond), G(a), G(b)), K::where(cond, a, b), 0, "where float32/bf16");
  Tensor a4 = rand({4, 1}, 9, DType::kFloat64);  // [1, 4] once transposed
  expect_matches(C::where(G(cond).transpose(0, 2), G(b.view({6, 1, 1})), G(a4).transpose(0, 1)),
                 K::where(cond.transpose(0, 2), b.view({6, 1, 1}), a4.transpose(0, 1)), 0,
                 "where strided");
  Tensor i = randint({5, 6}, 13, 100, DType::kInt32), l = randint({6}, 14, 100, DType::kInt64);
  expect_matches(C::where(G(cond), G(i), G(l)), K::where(cond, i, l), 0, "where int32/int64");
  expect_matches(C::where(G(cond), G(i), G(a)), K::where(cond, i, a), 0, "where int/float");
  Tensor n = Tensor::from_vector<double>({kNaN, 1, -kInf, 2}, {4});
  Tensor c4 = Tensor::from_vector<bool>({true, false, true, true}, {4});
  expect_matches(C::where(G(c4), G(n), G(Tensor::full({}, 7.0, DType::kFloat64))),
                 K::where(c4, n, Tensor::full({}, 7.0, DType::kFloat64)), 1e-12, "where NaN 0-d");
  expect_matches(C::where(G(c4), G(c4), G(K::gt(n, 0.0))), K::where(c4, c4, K::gt(n, 0.0)), 0,
                 "where bool");
  expect_error([&] { C::where(G(i), G(a), G(b)); }, "where: condition must be bool, got int32");
  expect_error([&] { C::where(G(cond), G(rand({3}, 1)), G(b)); }, "where: shapes");

  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16,
                   DType::kInt64, DType::kInt32, DType::kInt8, DType::kUInt8, DType::kBool}) {
    Tensor x = is_floating(dt) ? rand({3, 4, 5}, 15, dt) : randint({3, 4, 5}, 16, 9, dt);
    Tensor mask = K::gt(rand({4, 1}, 17), 0.0);
    const std::string w = std::string("masked_fill ") + dtype_name(dt);
    expect_matches(C::masked_fill(G(x), G(mask), 2.7), K::masked_fill(x, mask, 2.7), 0, w);
    expect_matches(C::masked_fill(G(x).transpose(0, 1), G(mask.view({4, 1, 1})), -3),
                   K::masked_fill(x.transpose(0, 1), mask.view({4, 1, 1}), -3), 0, w + " strided");
    expect_matches(C::masked_fill(G(x), G(mask), true), K::masked_fill(x, mask, true), 0,
                   w + " bool value");
    if (is_floating(dt)) {
      expect_matches(C::masked_fill(G(x), G(mask), -kInf), K::masked_fill(x, mask, -kInf), 0,
                     w + " -inf");
      expect_matches(C::masked_fill(G(x), G(mask), kNaN), K::masked_fill(x, mask, kNaN), 1e-12,
                     w + " NaN");
    }
  }
  Tensor x = rand({3, 4}, 18);
  expect_error(
      [&] {
        C::masked_fill(G(x), G(Tensor::zeros({3, 4}, DType::kInt64)), 1.0);
      },
      "masked_fill: mask must be bool, got int64");
  expect_error(
      [&] {
        C::masked_fill(G(x), G(K::gt(rand({2, 3, 4}, 19), 0.0)), 1.0);
      },
      "masked_fill: mask [2, 3, 4] does not broadcast to the input's shape [3, 4]");
}

TEST_F(Compare, PowTensorAndScalar) {
  for (DType dt : kFloats) {
    Tensor base = rand({4, 7}, 20, dt, 0.1, 3), e = rand({7}, 21, dt, -2, 2);
    const std::string w = std::string("pow ") + dtype_name(dt);
    expect_matches(C::pow(G(base), G(e)), K::pow(base, e), tol(dt) * 4, w);
    expect_matches(C::pow(G(base).transpose(0, 1), G(e.view({7, 1}))),
                   K::pow(base.transpose(0, 1), e.view({7, 1})), tol(dt) * 4, w + " strided");
    expect_matches(C::pow(G(base), 2.5), K::pow(base, 2.5), tol(dt) * 4, w + " ** 2.5");
    expect_matches(C::pow(G(base), -1), K::pow(base, -1), tol(dt) * 4, w + " ** -1");
  }
  // Negative bases with integral exponents, NaN, inf, 0 ** 0.
  Tensor nb = Tensor::from_vector<double>({-2, -1.5, 0, 0, kNaN, 1, kInf, -kInf, 2}, {9});
  Tensor ne = Tensor::from_vector<double>({3, 2, 0, -1, 0, kNaN, -1, 3, 0.5}, {9});
  expect_matches(C::pow(G(nb), G(ne)), K::pow(nb, ne), 1e-12, "pow special float64");
  expect_matches(C::pow(G(nb.to(DType::kFloat32)), G(ne.to(DType::kFloat32))),
                 K::pow(nb.to(DType::kFloat32), ne.to(DType::kFloat32)), 1e-6,
                 "pow special float32");
  // Integers: exact, wrapping, negative exponents.
  Tensor ib = Tensor::from_vector<int64_t>({2, -3, 1, -1, -1, 0, 5, 7, 3}, {9});
  Tensor ie = Tensor::from_vector<int64_t>({10, 3, -5, -3, -4, 0, -1, 40, 0}, {9});
  expect_matches(C::pow(G(ib), G(ie)), K::pow(ib, ie), 0, "pow int64 (wrapping, negative)");
  expect_matches(C::pow(G(ib.to(DType::kInt32)), G(ie.to(DType::kInt32))),
                 K::pow(ib.to(DType::kInt32), ie.to(DType::kInt32)), 0, "pow int32");
  expect_matches(C::pow(G(ib), 3), K::pow(ib, 3), 0, "pow int ** 3");
  expect_matches(C::pow(G(ib), 0.5), K::pow(ib, 0.5), 1e-6, "pow int ** 0.5 -> float32");
  expect_matches(C::pow(G(ib), G(ne)), K::pow(ib, ne), 1e-12, "pow int64 ** float64");
  Tensor bt = Tensor::from_vector<bool>({true, false, true}, {3});
  expect_matches(C::pow(G(bt), G(bt)), K::pow(bt, bt), 0, "pow bool");
  expect_error([&] { C::pow(G(ib), -2); }, "pow: integers to negative integer powers");
  expect_error([&] { C::pow(G(ib), G(rand({4}, 1))); }, "pow: shapes");
}

TEST_F(Compare, GeluBackward) {
  for (DType dt : kFloats) {
    Tensor g = rand({3, 17}, 30, dt, -2, 2), x = rand({3, 17}, 31, dt, -4, 4);
    for (const char* approx : {"none", "tanh"}) {
      const std::string w = std::string("gelu_backward ") + approx + " " + dtype_name(dt);
      expect_matches(C::gelu_backward(G(g), G(x), approx), K::gelu_backward(g, x, approx),
                     tol(dt) * 4, w);
      expect_matches(C::gelu_backward(G(g.narrow(1, 0, 1)),
                                      G(x.transpose(0, 1).contiguous()).transpose(0, 1), approx),
                     K::gelu_backward(g.narrow(1, 0, 1), x, approx), tol(dt) * 4, w + " broadcast");
    }
  }
  Tensor g = rand({4}, 32, DType::kBFloat16), x = rand({4}, 33, DType::kFloat64);
  expect_matches(C::gelu_backward(G(g), G(x), "none"), K::gelu_backward(g, x), 1e-6, "mixed dtypes");
  Tensor n = Tensor::from_vector<double>({kNaN, kInf, -kInf, 0}, {4});
  expect_matches(C::gelu_backward(G(Tensor::full({4}, 1.0, DType::kFloat64)), G(n), "none"),
                 K::gelu_backward(Tensor::full({4}, 1.0, DType::kFloat64), n), 1e-12, "NaN/inf");
  expect_error([&] { C::gelu_backward(G(g), G(x), "exact"); },
               "gelu_backward: unknown approximate 'exact'");
  expect_error([&] { C::gelu_backward(G(g), G(Tensor::zeros({4}, DType::kInt64)), "none"); },
               "gelu_backward: grad and self must be floating");
}

using Reduce = CudaTest;

const std::vector<std::vector<int64_t>> kDimSets = {{}, {0}, {1}, {-1}, {0, 2}, {2, 0, 1}};

TEST_F(Reduce, ProdOverDimSets) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64, DType::kInt32,
                   DType::kBool}) {
    Tensor x = is_floating(dt) ? rand({5, 6, 7}, 40, dt, 0.6, 1.5)
                               : K::sub(randint({5, 6, 7}, 41, 7, DType::kInt64), 3).to(dt);
    if (dt == DType::kBool) x = K::gt(rand({5, 6, 7}, 42), -0.9);
    for (const auto& dims : kDimSets)
      for (bool keep : {false, true}) {
        const std::string w =
            absl::StrCat("prod ", dtype_name(dt), " dims ", dims.size(), keep ? " keep" : "");
        const double t = is_floating(dt) ? tol(dt) * 10 : 0;
        expect_matches(C::prod(G(x), dims, keep), K::prod(x, dims, keep), t, w);
        expect_matches(C::prod(G(x).transpose(0, 2), dims, keep),
                       K::prod(x.transpose(0, 2), dims, keep), t, w + " strided");
      }
  }
  // Long rows split over blocks; NaN, inf and zero; an empty dim gives 1.
  Tensor y = rand({1 << 20}, 43, DType::kFloat64, 0.9999, 1.0001);
  expect_matches(C::prod(G(y), {}, false), K::prod(y), 1e-9, "prod long");
  Tensor z = rand({3, 70000}, 44, DType::kFloat64, 0.9999, 1.0001);
  expect_matches(C::prod(G(z), {1}, false), K::prod(z, {1}), 1e-9, "prod long rows");
  expect_matches(C::prod(G(z.transpose(0, 1)), {0}, false), K::prod(z.transpose(0, 1), {0}), 1e-9,
                 "prod long columns");
  Tensor s = Tensor::from_vector<double>({1, kNaN, 2, 0, kInf, 3, 0, kInf, 2}, {3, 3});
  expect_matches(C::prod(G(s), {1}, false), K::prod(s, {1}), 1e-12, "prod special");
  expect_matches(C::prod(G(Tensor::zeros({2, 0})), {1}, false), K::prod(Tensor::zeros({2, 0}), {1}), 0,
                 "prod empty");
}

TEST_F(Reduce, VarStdWithCorrections) {
  for (DType dt : kFloats) {
    Tensor x = rand({5, 6, 7}, 50, dt, -3, 5);
    for (const auto& dims : kDimSets)
      for (double corr : {0.0, 1.0, 2.5})
        for (bool keep : {false, true}) {
          const std::string w = absl::StrCat(dtype_name(dt), " dims ", dims.size(), " corr ", corr,
                                             keep ? " keep" : "");
          const double t = tol(dt) * 10;
          expect_matches(C::var(G(x), dims, corr, keep), K::var(x, dims, corr, keep), t,
                         "var " + w);
          expect_matches(C::std(G(x).transpose(1, 2), dims, corr, keep),
                         K::std(x.transpose(1, 2), dims, corr, keep), t, "std " + w);
        }
  }
  // N - correction <= 0 (inf / NaN), NaN inputs, 0-d, a size-0 dim, long rows and columns.
  Tensor s = Tensor::from_vector<double>({1, 2, 3, 4, kNaN, 6}, {2, 3});
  for (double corr : {1.0, 3.0, 4.0}) {
    expect_matches(C::var(G(s), {1}, corr, false), K::var(s, {1}, corr), 1e-12, "var special");
    expect_matches(C::std(G(s), {0}, corr, false), K::std(s, {0}, corr), 1e-12, "std special");
  }
  Tensor zd = Tensor::full({}, 2.0, DType::kFloat32);
  expect_matches(C::var(G(zd), {}, 1, false), K::var(zd), 1e-6, "var 0-d");
  expect_matches(C::var(G(zd), {}, 0, false), K::var(zd, {}, 0), 1e-6, "var 0-d correction 0");
  expect_matches(C::var(G(Tensor::zeros({2, 0})), {1}, 1, false), K::var(Tensor::zeros({2, 0}), {1}), 1e-6,
                 "var empty");
  Tensor y = rand({3, 100000}, 51, DType::kFloat64, 10, 11);  // mean far from 0
  expect_matches(C::var(G(y), {1}, 1, false), K::var(y, {1}), 1e-9, "var long rows");
  expect_matches(C::std(G(y), {0}, 1, false), K::std(y, {0}), 1e-9, "std short columns");
  expect_matches(C::std(G(y.transpose(0, 1)), {0}, 1, false), K::std(y.transpose(0, 1), {0}), 1e-9,
                 "std long columns");
  Tensor f = rand({1 << 21}, 52, DType::kFloat32, 100, 101);
  expect_matches(C::var(G(f), {}, 1, false), K::var(f), 1e-4, "var float32 whole tensor");
  expect_error([&] { C::var(G(Tensor::zeros({3}, DType::kInt64)), {}, 1, false); },
               "var: expected a floating tensor, got int64");
  expect_error([&] { C::std(G(rand({3, 4}, 1)), {1, -1}, 1, false); }, "std: dim 1 appears more than once");
}

TEST_F(Reduce, LogSumExp) {
  for (DType dt : kFloats) {
    Tensor x = rand({5, 6, 7}, 60, dt, -20, 20);
    for (const auto& dims : kDimSets)
      for (bool keep : {false, true}) {
        const std::string w =
            absl::StrCat("logsumexp ", dtype_name(dt), " dims ", dims.size(), keep ? " keep" : "");
        expect_matches(C::logsumexp(G(x), dims, keep), K::logsumexp(x, dims, keep), tol(dt) * 10,
                       w);
        expect_matches(C::logsumexp(G(x).transpose(0, 1), dims, keep),
                       K::logsumexp(x.transpose(0, 1), dims, keep), tol(dt) * 10, w + " strided");
      }
  }
  // Integers give float32; rows of -inf, +inf, NaN; large values (the shift); a size-0 dim.
  Tensor i = randint({4, 9}, 61, 50, DType::kInt32);
  expect_matches(C::logsumexp(G(i), {1}, false), K::logsumexp(i, {1}), 1e-5, "logsumexp int32");
  expect_matches(C::logsumexp(G(K::gt(i, 20)), {0}, false), K::logsumexp(K::gt(i, 20), {0}), 1e-5,
                 "logsumexp bool");
  Tensor s = Tensor::from_vector<double>(
      {-kInf, -kInf, -kInf, 1, kInf, 2, kNaN, 1, 2, kInf, kNaN, 0, 1000, 1001, 999, -kInf, 3, 4},
      {6, 3});
  expect_matches(C::logsumexp(G(s), {1}, false), K::logsumexp(s, {1}), 1e-12, "logsumexp special");
  expect_matches(C::logsumexp(G(s.to(DType::kFloat32)), {1}, false),
                 K::logsumexp(s.to(DType::kFloat32), {1}), 1e-5, "logsumexp special float32");
  expect_matches(C::logsumexp(G(Tensor::zeros({2, 0})), {1}, false),
                 K::logsumexp(Tensor::zeros({2, 0}), {1}), 0, "logsumexp empty");
  Tensor y = rand({2, 300000}, 62, DType::kFloat32, -5, 5);
  expect_matches(C::logsumexp(G(y), {1}, false), K::logsumexp(y, {1}), 1e-5, "logsumexp long rows");
  expect_matches(C::logsumexp(G(y).transpose(0, 1), {0}, false), K::logsumexp(y.transpose(0, 1), {0}),
                 1e-5, "logsumexp long columns");
}

}  // namespace
}  // namespace dtensor::cuda::testing
