// CUDA pointwise ops, reductions, softmax / norms and embedding against the CPU kernels.
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace dtensor::cuda::testing {
namespace {

namespace K = ::dtensor::kernels;
namespace C = ::dtensor::kernels::cuda;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const DType kFloats[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};

using Pointwise = CudaTest;

TEST_F(Pointwise, CopiesAndCastsOnTheDevice) {
  for (DType from : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16,
                     DType::kInt64, DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
    // uint8 from [-50, 50): the negative values wrap (as an integer cast from int64, on both sides)
    Tensor x = rand({5, 7}, 1, DType::kFloat64, -50, 50).to(from == DType::kUInt8 ? DType::kInt64 : from).to(from);
    // to int8: every value in range (a float out of an integer's range is undefined in C++ and CUDA)
    for (DType to : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kInt8, DType::kBool})
      expect_matches(C::to(G(x), to), x.to(to), 0,
                     std::string(dtype_name(from)) + "->" + dtype_name(to));
    // A transposed view made contiguous; a copy into a strided slice.
    expect_matches(C::contiguous(G(x).transpose(0, 1)), x.transpose(0, 1).contiguous(), 0);
    Tensor dst = C::zeros({7, 10}, from, gpu());
    Tensor slice = dst.narrow(1, 2, 5);
    C::copy_(slice, G(x).transpose(0, 1));
    Tensor want = Tensor::zeros({7, 10}, from);
    want.narrow(1, 2, 5).copy_(x.transpose(0, 1));
    expect_matches(dst, want, 0);
  }
  expect_matches(C::full({3, 2}, 2.5, DType::kBFloat16, gpu()),
                 Tensor::full({3, 2}, 2.5, DType::kBFloat16), 0);
}

TEST_F(Pointwise, BinaryOpsBroadcastAndPromote) {
  Tensor a = rand({4, 1, 6}, 2), b = rand({5, 1}, 3, DType::kBFloat16, 0.5, 2);
  expect_matches(C::add(G(a), G(b), 2.5), K::add(a, b, 2.5));
  expect_matches(C::sub(G(b), G(a), 1), K::sub(b, a));
  expect_matches(C::mul(G(a.transpose(0, 2)), G(b)), K::mul(a.transpose(0, 2), b));
  expect_matches(C::div(G(a), G(b), ""), K::div(a, b));
  expect_matches(C::mul(G(a), 3), K::mul(a, 3));
  expect_matches(C::add(G(b), 0.25, 1), K::add(b, 0.25));
  Tensor i = randint({6, 3}, 4, 20, DType::kInt64), j = randint({3}, 5, 7, DType::kInt32);
  Tensor jp = K::add(j, 1).to(DType::kInt32);  // no zero divisors
  expect_matches(C::add(G(i), G(j), 3), K::add(i, j, 3), 0);
  expect_matches(C::sub(G(i), G(jp), 1), K::sub(i, jp), 0);
  expect_matches(C::div(G(K::neg(i)), G(jp), "floor"), K::div(K::neg(i), jp, "floor"), 0);
  expect_matches(C::div(G(K::neg(i)), G(jp), "trunc"), K::div(K::neg(i), jp, "trunc"), 0);
  expect_matches(C::div(G(i), G(jp), ""), K::div(i, jp));  // true division: float32
  expect_matches(C::div(G(a), G(b), "floor"), K::div(a, b, "floor"));
  Tensor z = Tensor::zeros({3}, DType::kInt32);
  EXPECT_THROW(C::div(G(i), G(z), "trunc"), Error);
  Tensor n = Tensor::from_vector<double>({1, kNaN, 3, -kInf}, {4});
  Tensor m = Tensor::from_vector<double>({kNaN, 2, 1, 0}, {4});
  expect_matches(C::maximum(G(n), G(m)), K::maximum(n, m), 0);
  expect_matches(C::minimum(G(n), G(m)), K::minimum(n, m), 0);
  Tensor t = Tensor::from_vector<bool>({true, false, true}, {3});
  expect_matches(C::add(G(t), G(t), 1), K::add(t, t), 0);
  EXPECT_THROW(C::sub(G(t), G(t), 1), Error);
}

TEST_F(Pointwise, UnaryOpsInEveryFloatingDtype) {
  for (DType dt : kFloats) {
    Tensor x = rand({3, 17}, 6, dt, -3, 3), p = rand({3, 17}, 7, dt, 0.1, 4);
    const std::string d = dtype_name(dt);
    expect_matches(C::neg(G(x)), K::neg(x), -1, "neg " + d);
    expect_matches(C::abs(G(x)), K::abs(x), -1, "abs " + d);
    expect_matches(C::relu(G(x)), K::relu(x), -1, "relu " + d);
    expect_matches(C::exp(G(x)), K::exp(x), -1, "exp " + d);
    expect_matches(C::log(G(p)), K::log(p), -1, "log " + d);
    expect_matches(C::sqrt(G(p)), K::sqrt(p), -1, "sqrt " + d);
    expect_matches(C::rsqrt(G(p)), K::rsqrt(p), -1, "rsqrt " + d);
    expect_matches(C::tanh(G(x)), K::tanh(x), -1, "tanh " + d);
    expect_matches(C::sigmoid(G(x)), K::sigmoid(x), -1, "sigmoid " + d);
    expect_matches(C::gelu(G(x), "none"), K::gelu(x), -1, "gelu " + d);
    expect_matches(C::gelu(G(x), "tanh"), K::gelu(x, "tanh"), -1, "gelu tanh " + d);
    expect_matches(C::silu(G(x.transpose(0, 1))), K::silu(x.transpose(0, 1)), -1, "silu " + d);
  }
  Tensor i = randint({9}, 8, 10, DType::kInt32);
  Tensor ni = K::neg(i);
  expect_matches(C::neg(G(i)), ni, 0);
  expect_matches(C::abs(G(ni)), K::abs(ni), 0);
  expect_matches(C::relu(G(ni)), K::relu(ni), 0);
  expect_matches(C::exp(G(i)), K::exp(i));  // int -> float32
  EXPECT_THROW(C::gelu(G(i), "none"), Error);
  EXPECT_THROW(C::neg(G(Tensor::zeros({2}, DType::kBool))), Error);
}

// Every row of the pointwise tables (ops/pointwise/rows.h), in each dtype its rule accepts, on
// strided and broadcast inputs in the row's domain: the CUDA functor against the CPU one.
TEST_F(Pointwise, EveryRowMatchesTheCpuKernel) {
  auto in_domain = [](RowDomain d, uint64_t seed, DType dt) {
    switch (d) {
      case RowDomain::kPositive:
        return rand({3, 17}, seed, dt, 0.25, 2.25);
      case RowDomain::kUnit:
        return rand({3, 17}, seed, dt, -0.9, 0.9);
      case RowDomain::kAboveOne:
        return rand({3, 17}, seed, dt, 1.1, 3);
      default:
        return rand({3, 17}, seed, dt, -3, 3);
    }
  };
  auto dtypes = [](RowDTypes r) {
    switch (r) {
      case RowDTypes::kFloat:
      case RowDTypes::kFloatOnly:
        return std::vector<DType>{DType::kFloat32, DType::kFloat64, DType::kBFloat16};
      case RowDTypes::kIntegral:  // the narrow ones wrap (shifts, ~x) through the int64 compute type
        return std::vector<DType>{DType::kInt64, DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8,
                                  DType::kBool};
      default:
        return std::vector<DType>{DType::kFloat32, DType::kFloat64, DType::kInt64};
    }
  };
  for (int r = 0; r < static_cast<int>(std::size(kUnaryRows)); ++r) {
    const UnaryRow row = static_cast<UnaryRow>(r);
    const UnaryRowInfo& info = kUnaryRows[r];
    for (DType dt : dtypes(info.dtypes)) {
      const Tensor x = is_floating(dt) ? in_domain(info.domain, 11 + r, dt) : randint({3, 17}, 11 + r, 9, dt);
      const std::string what = absl::StrCat(info.name, " ", dtype_name(dt));
      expect_matches(C::pointwise_unary_row(row, G(x)), K::pointwise_unary_row(row, x), -1, what);
      expect_matches(C::pointwise_unary_row(row, G(x).transpose(0, 1)),
                     K::pointwise_unary_row(row, x.transpose(0, 1)), -1, what + " transposed");
    }
  }
  // The rows with parameters, at parameter values away from the defaults (None where allowed).
  for (int r = 0; r < static_cast<int>(std::size(kParamRows)); ++r) {
    const ParamRow row = static_cast<ParamRow>(r);
    const ParamRowInfo& info = kParamRows[r];
    RowParams p;
    p.p[0] = info.name == std::string("clamp") ? std::nan("") : 0.3;
    p.p[1] = 1.4;
    p.p[2] = 0.8;
    for (DType dt : dtypes(info.dtypes)) {
      const Tensor x = is_floating(dt) ? rand({3, 17}, 51 + r, dt, -3, 3) : randint({3, 17}, 51 + r, 9, dt);
      if (!is_floating(dt)) {  // integer bounds (the rows that take integers: clamp, hardtanh)
        p.p[0] = info.name == std::string("clamp") ? std::nan("") : -2.0;
        p.p[1] = 4.0;
      }
      const std::string what = absl::StrCat(info.name, " ", dtype_name(dt));
      expect_matches(C::pointwise_param_row(row, G(x), p), K::pointwise_param_row(row, x, p), -1, what);
      expect_matches(C::pointwise_param_row(row, G(x).transpose(0, 1), p),
                     K::pointwise_param_row(row, x.transpose(0, 1), p), -1, what + " transposed");
    }
  }
  for (int r = 0; r < static_cast<int>(std::size(kBinaryRows)); ++r) {
    const BinaryRow row = static_cast<BinaryRow>(r);
    const BinaryRowInfo& info = kBinaryRows[r];
    for (DType dt : dtypes(info.dtypes)) {
      const Tensor a = is_floating(dt) ? rand({4, 1, 6}, 31 + r, dt, -3, 3) : randint({4, 1, 6}, 31 + r, 9, dt);
      // Divisors without zeros (integer division by zero is an error, checked below).
      const Tensor b = is_floating(dt) ? rand({5, 1}, 41 + r, dt, 0.25, 2.25)
                                       : K::add(randint({5, 1}, 41 + r, 6, DType::kInt64), 1).to(dt);
      const std::string what = absl::StrCat(info.name, " ", dtype_name(dt));
      expect_matches(C::pointwise_binary_row(row, G(a), G(b)), K::pointwise_binary_row(row, a, b), -1, what);
    }
    if (info.divides()) {
      EXPECT_THROW(C::pointwise_binary_row(row, G(randint({3}, 5, 9)), G(Tensor::zeros({3}, DType::kInt64))),
                   Error)
          << info.name;
    }
  }
}

using Reduction = CudaTest;

TEST_F(Reduction, SumMeanAmaxAminOverDimSets) {
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {1}, {-1}, {0, 2}, {2, 0, 1}};
  for (DType dt :
       {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64, DType::kBool}) {
    Tensor x = is_floating(dt) ? rand({5, 6, 7}, 10, dt) : randint({5, 6, 7}, 11, 4, dt);
    for (const auto& dims : dim_sets)
      for (bool keep : {false, true}) {
        const std::string w =
            absl::StrCat(dtype_name(dt), " dims ", dims.size(), keep ? " keep" : "");
        const double t = is_floating(dt) ? tol(dt) * 10 : 0;
        expect_matches(C::sum(G(x), dims, keep), K::sum(x, dims, keep), t, "sum " + w);
        expect_matches(C::amax(G(x), dims, keep), K::amax(x, dims, keep), 0, "amax " + w);
        expect_matches(C::amin(G(x.transpose(0, 2)), dims, keep),
                       K::amin(x.transpose(0, 2), dims, keep), 0, "amin " + w);
        if (is_floating(dt))
          expect_matches(C::mean(G(x), dims, keep), K::mean(x, dims, keep), t, "mean " + w);
      }
  }
}

TEST_F(Reduction, LongReductionsSplitAcrossBlocksAndNaN) {
  Tensor x = rand({1 << 22}, 12, DType::kFloat32, 0, 1);
  expect_matches(C::sum(G(x), {}, false), K::sum(x), 1e-4);
  expect_matches(C::mean(G(x), {}, false), K::mean(x), 1e-6);
  Tensor y = rand({3, 100000}, 13, DType::kFloat64);
  expect_matches(C::sum(G(y), {1}, false), K::sum(y, {1}), 1e-9);
  expect_matches(C::amax(G(y), {0}, false), K::amax(y, {0}), 0);
  Tensor n = Tensor::from_vector<double>({1, kNaN, 3, 4, 5, 6}, {2, 3});
  expect_matches(C::amax(G(n), {1}, false), K::amax(n, {1}), 0);
  expect_matches(C::amin(G(n), {0}, false), K::amin(n, {0}), 0);
  EXPECT_THROW(C::amax(G(Tensor::zeros({2, 0})), {1}, false), Error);
  EXPECT_THROW(C::mean(G(Tensor::zeros({2}, DType::kInt64)), {}, false), Error);
  expect_matches(C::sum(G(Tensor::zeros({2, 0})), {1}, false), K::sum(Tensor::zeros({2, 0}), {1}), 0);
}

using Norm = CudaTest;

TEST_F(Norm, SoftmaxAndLogSoftmax) {
  for (DType dt : kFloats) {
    Tensor x = rand({4, 9, 5}, 20, dt, -4, 4);
    for (int64_t dim : {0, 1, -1}) {
      expect_matches(C::softmax(G(x), dim), K::softmax(x, dim), -1, "softmax");
      expect_matches(C::log_softmax(G(x), dim), K::log_softmax(x, dim), tol(dt) * 10,
                     "log_softmax");
    }
  }
  // Rows beyond the shared-memory cache, rows of -inf, +inf, masked entries.
  Tensor big = rand({3, 20000}, 21, DType::kFloat32, -8, 8);
  expect_matches(C::softmax(G(big), 1), K::softmax(big, 1), -1, "softmax of long rows");
  expect_matches(C::log_softmax(G(big), -1), K::log_softmax(big, -1), 1e-4, "log_softmax of long rows");
  // The register kernel: float32 / bfloat16 / float16 rows of whole 16-byte vectors, 1 to 8 per
  // thread (8 and 24 elements, 4096, 8192), and float32 rows with -inf, +inf and NaN.
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
    for (int64_t n : {8, 24, 4096, 8192}) {
      const Tensor r = rand({5, n}, 22, dt, -8, 8);
      const std::string w = absl::StrCat(dtype_name(dt), " rows of ", n);
      expect_matches(C::softmax(G(r), 1), K::softmax(r, 1), -1, "softmax, " + w);
      expect_matches(C::log_softmax(G(r), -1), K::log_softmax(r, -1), tol(dt) * 10, "log_softmax, " + w);
    }
  std::vector<float> odd(4 * 8, 0.5f);
  odd[0] = odd[1] = -kInf;  // row 0: -inf entries
  for (int j = 8; j < 16; ++j) odd[j] = -kInf;  // row 1: -inf only (NaN, as on the CPU)
  odd[17] = kInf;  // row 2: +inf (NaN from inf - inf, as on the CPU)
  odd[27] = kNaN;  // row 3: NaN
  const Tensor special = Tensor::from_vector<float>(odd, {4, 8});
  expect_matches(C::softmax(G(special), 1), K::softmax(special, 1), 1e-6, "softmax, register path, infinities");
  expect_matches(C::log_softmax(G(special), 1), K::log_softmax(special, 1), 1e-6,
                 "log_softmax, register path, infinities");
  Tensor e = Tensor::from_vector<double>({-kInf, -kInf, 0, -kInf, 1, 2, kInf, 1, 0}, {3, 3});
  for (int64_t dim : {0, 1}) {
    // dim 0 runs the column kernel, whose running max starts at -inf: a leading -inf must not
    // make the sum NaN (it did: exp(-inf - -inf)).
    expect_matches(C::softmax(G(e), dim), K::softmax(e, dim), 1e-12, "softmax with infinities");
    expect_matches(C::log_softmax(G(e), dim), K::log_softmax(e, dim), 1e-12,
                   "log_softmax with infinities");
  }
  EXPECT_THROW(C::softmax(G(Tensor::zeros({2}, DType::kInt64)), 0), Error);
}

// The register kernel (kernels/cuda/norm_kernels.cu, softmax_rows_vec_kernel) in every shape of
// softmax_math::vec_shape for float32 / bfloat16 / float16 (row vectors: 1; 33: 32 threads x 2;
// 100: 32 x 4 or 8; 200, 300, 600: 64 / 128 / 256 threads; 1500: 256 x 8), most of them leaving
// threads with vectors past the row's end; rows far from 0 on both sides of the pre-scaled
// exponent's limit (2^24); -inf entries, a row of -inf, +inf and NaN in a long row, where the
// values meet in the block's reductions.
TEST_F(Norm, SoftmaxRegisterPathShapesAndSpecials) {
  uint64_t seed = 40;
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const int64_t vec = dt == DType::kFloat32 ? 4 : 8;
    for (int64_t nvec : {1, 33, 100, 200, 300, 600, 1500}) {
      const Tensor r = rand({3, nvec * vec}, seed++, dt, -8, 8);
      const std::string w = absl::StrCat(dtype_name(dt), " rows of ", nvec, " vectors");
      expect_matches(C::softmax(G(r), 1), K::softmax(r, 1), -1, "softmax, " + w);
      expect_matches(C::log_softmax(G(r), 1), K::log_softmax(r, 1), tol(dt) * 10, "log_softmax, " + w);
    }
    for (double base : {6e4, -6e4, 3e7, 1e30, -1e30}) {
      if (dt == DType::kFloat16 && std::abs(base) > 6e4) continue;  // beyond float16
      const Tensor r = rand({3, 64 * vec}, seed++, dt, base - 8, base + 8);
      const std::string w = absl::StrCat(dtype_name(dt), " rows around ", base);
      expect_matches(C::softmax(G(r), 1), K::softmax(r, 1), -1, "softmax, " + w);
      expect_matches(C::log_softmax(G(r), 1), K::log_softmax(r, 1), tol(dt) * 10, "log_softmax, " + w);
    }
    const int64_t n = 300 * vec;
    std::vector<double> v = rand({4, n}, seed++, DType::kFloat64, -4, 4).to_vector<double>();
    for (int64_t j = 0; j < n; j += 7) v[j] = -kInf;  // row 0: -inf entries
    for (int64_t j = n; j < 2 * n; ++j) v[j] = -kInf;  // row 1: -inf only (NaN)
    v[2 * n + n - 3] = kInf;                            // row 2: +inf (NaN)
    v[3 * n + 5 * vec + 1] = kNaN;                      // row 3: NaN (NaN)
    const Tensor special = Tensor::from_vector<double>(v, {4, n}).to(dt);
    const double t = dt == DType::kFloat32 ? 1e-6 : tol(dt);
    const std::string w = absl::StrCat(dtype_name(dt), " register path, infinities and NaN");
    expect_matches(C::softmax(G(special), 1), K::softmax(special, 1), t, "softmax, " + w);
    expect_matches(C::log_softmax(G(special), 1), K::log_softmax(special, 1), t * 10, "log_softmax, " + w);
  }
}

// The fused backward against the CPU kernel (both in double): float32/float64/bfloat16 inputs, with
// and without a weight, a multi-dim normalized_shape, more rows than one column chunk (64), a
// non-contiguous grad_out.
TEST_F(Norm, LayerNormBackwardMatchesCpu) {
  for (DType dt : kFloats) {
    for (const Shape& s : {Shape{6, 4, 10}, Shape{300, 33}}) {
      const Shape ns(s.end() - (s.size() == 3 ? 2 : 1), s.end());
      Tensor x = rand(s, 30, dt, -2, 3), w = rand(ns, 31, DType::kFloat32, 0.5, 1.5);
      Tensor g = rand({s.back(), numel(s) / s.back()}, 32, dt).transpose(0, 1).reshape(s);
      const double t = dt == DType::kFloat64 ? 1e-12 : tol(dt) * 10;
      const std::string what = absl::StrCat("layer_norm_backward ", dtype_name(dt), " ", shape_str(s));
      for (bool with_w : {true, false}) {
        std::optional<Tensor> wo = with_w ? std::optional<Tensor>(w) : std::nullopt;
        std::optional<Tensor> gw = with_w ? std::optional<Tensor>(G(w)) : std::nullopt;
        std::vector<Tensor> want = K::layer_norm_backward(g, x, ns, wo, 1e-5);
        std::vector<Tensor> got = C::layer_norm_backward(G(g), G(x), ns, gw, 1e-5);
        ASSERT_EQ(got.size(), 3u);
        expect_matches(got[0], want[0], t, what + " input");
        expect_matches(got[1], want[1], with_w ? 1e-5 : t, what + " weight");
        expect_matches(got[2], want[2], with_w ? 1e-5 : t, what + " bias");
      }
    }
  }
  EXPECT_THROW(C::layer_norm_backward(G(rand({2, 3}, 1)), G(rand({2, 4}, 2)), {4}, std::nullopt, 1e-5), Error);
}

TEST_F(Norm, LayerNormAndRmsNorm) {
  for (DType dt : kFloats) {
    Tensor x = rand({6, 4, 10}, 22, dt, -2, 3);
    Tensor w = rand({4, 10}, 23, DType::kFloat32), b = rand({4, 10}, 24, DType::kFloat32);
    const double t = tol(dt) * 10;
    expect_matches(C::layer_norm(G(x), {10}, std::nullopt, std::nullopt, 1e-5), K::layer_norm(x, {10}), t, "layer_norm");
    expect_matches(C::layer_norm(G(x), {4, 10}, G(w), G(b), 1e-3),
                   K::layer_norm(x, {4, 10}, w, b, 1e-3), t, "layer_norm affine");
    expect_matches(C::rms_norm(G(x), {10}, std::nullopt, std::nullopt), K::rms_norm(x, {10}), t, "rms_norm");
    // A non-contiguous input whose trailing dims are the normalized [4, 10].
    Tensor xt = rand({4, 6, 10}, 25, dt, -2, 3).transpose(0, 1);
    expect_matches(C::rms_norm(G(xt), {4, 10}, G(w), std::nullopt), K::rms_norm(xt, {4, 10}, w), t,
                   "rms_norm affine");
  }
  EXPECT_THROW(C::layer_norm(G(rand({2, 3}, 1)), {2}, std::nullopt, std::nullopt, 1e-5), Error);
}

using Embedding = CudaTest;

TEST_F(Embedding, LookupsMaskedShardsAndBadIndices) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kInt32}) {
    Tensor w = rand({11, 6}, 30, dt, -5, 5);
    for (DType it : {DType::kInt64, DType::kInt32}) {
      Tensor idx = randint({3, 4}, 31, 11, it);
      expect_matches(C::embedding(G(w), G(idx)), K::embedding(w, idx), 0);
      Tensor shard = w.narrow(0, 4, 5);
      expect_matches(C::embedding_masked(G(shard), G(idx), 4, 9),
                     K::embedding_masked(shard, idx, 4, 9), 0);
    }
  }
  Tensor w = rand({5, 2}, 32);
  try {
    C::embedding(G(w), G(Tensor::from_vector<int64_t>({1, 7, 2}, {3})));
    ADD_FAILURE() << "expected an index error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 7 out of range"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtensor::cuda::testing
