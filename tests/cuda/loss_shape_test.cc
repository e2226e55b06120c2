// CUDA losses (nll_loss, cross_entropy), their backward kernels (nll_loss_backward,
// embedding_dense_backward) and the shape ops (stack, index_select) against the CPU kernels.
#include <limits>
#include <optional>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace dtensor::cuda::testing {
namespace {

namespace K = ::dtensor::kernels;
namespace C = ::dtensor::kernels::cuda;
constexpr double kInf = std::numeric_limits<double>::infinity();

const DType kFloats[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};
const char* const kReductions[] = {"none", "sum", "mean"};

template <typename F>
void expect_error(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

std::optional<Tensor> G(const std::optional<Tensor>& t) {
  if (!t) return std::nullopt;
  return ::dtensor::cuda::testing::G(*t);
}
using ::dtensor::cuda::testing::G;

// Class targets in [0, c) with some entries set to ignore_index.
Tensor targets(const Shape& s, uint64_t seed, int64_t c, int64_t ignore, DType dt) {
  std::vector<int64_t> v = randint(s, seed, c).to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); i += 3) v[i] = ignore;
  return Tensor::from_vector(v, s).to(dt);
}

using Loss = CudaTest;

TEST_F(Loss, NllLossMatchesTheCpu) {
  for (DType dt : kFloats) {
    const double t = tol(dt) * 10;
    // [N, C], [N, C, d1, d2] (classes on dim 1 with inner dims), [C] with a 0-d target.
    const std::vector<std::pair<Shape, Shape>> cases = {
        {{7, 5}, {7}}, {{3, 4, 2, 5}, {3, 2, 5}}, {{6}, {}}};
    for (const auto& [ishape, tshape] : cases) {
      Tensor logp =
          K::log_softmax(rand(ishape, 1, DType::kFloat64, -3, 3), ishape.size() == 1 ? 0 : 1)
              .to(dt);
      const int64_t c = ishape.size() == 1 ? ishape[0] : ishape[1];
      Tensor w = rand({c}, 2, DType::kFloat32, 0.5, 2);
      for (DType it : {DType::kInt64, DType::kInt32}) {
        Tensor tg = tshape.empty() ? Tensor::from_vector<int64_t>({2}, {}).to(it)
                                   : targets(tshape, 3, c, -100, it);
        for (const char* red : kReductions)
          for (bool weighted : {false, true}) {
            const std::optional<Tensor> wt = weighted ? std::optional<Tensor>(w) : std::nullopt;
            const std::string what =
                absl::StrCat("nll_loss ", dtype_name(dt), " ", shape_str(ishape), " ", red,
                             weighted ? " w" : "");
            expect_matches(C::nll_loss(G(logp), G(tg), G(wt), red, -100), K::nll_loss(logp, tg, wt, red),
                           t, what);
          }
      }
    }
  }
  // ignore_index other than -100; all targets ignored ("mean" is NaN); strided input.
  Tensor logp = K::log_softmax(rand({5, 4}, 4, DType::kFloat32, -2, 2), 1);
  Tensor tg = Tensor::from_vector<int64_t>({1, 3, 1, 0, 2}, {5});
  expect_matches(C::nll_loss(G(logp), G(tg), std::nullopt, "mean", 1),
                 K::nll_loss(logp, tg, std::nullopt, "mean", 1), 1e-5, "ignore_index 1");
  Tensor all = Tensor::full({5}, -1.0, DType::kInt64);
  expect_matches(C::nll_loss(G(logp), G(all), std::nullopt, "mean", -1),
                 K::nll_loss(logp, all, std::nullopt, "mean", -1), 1e-5, "all ignored");
  expect_matches(C::nll_loss(G(logp.transpose(0, 1).contiguous()).transpose(0, 1), G(tg), std::nullopt, "mean", -100),
                 K::nll_loss(logp, tg), 1e-5, "strided input");
  // Errors: a target out of range, bad reduction / dtypes / shapes / weight.
  expect_error(
      [&] {
        C::nll_loss(G(logp), G(Tensor::from_vector<int64_t>({1, 7, 0, 0, 0}, {5})), std::nullopt, "mean", -100);
      },
      "nll_loss: target 7 out of range for 4 classes (accepted: 0 <= target < 4, or "
      "ignore_index -100)");
  expect_error([&] { C::nll_loss(G(logp), G(tg), std::nullopt, "avg", -100); },
               "nll_loss: unknown reduction 'avg'");
  expect_error(
      [&] {
        C::nll_loss(G(Tensor::zeros({5, 4}, DType::kInt64)), G(tg), std::nullopt, "mean", -100);
      },
      "nll_loss: input must be a floating tensor");
  expect_error([&] { C::nll_loss(G(logp), G(tg.to(DType::kFloat32)), std::nullopt, "mean", -100); },
               "nll_loss: class-index target must be int64 or int32, got float32");
  expect_error([&] { C::nll_loss(G(logp), G(tg.narrow(0, 0, 4)), std::nullopt, "mean", -100); },
               "nll_loss: target [4] does not match the input (accepted: [5])");
  expect_error([&] { C::nll_loss(G(logp), G(tg), G(rand({3}, 5)), "mean", -100); },
               "nll_loss: weight float32 [3] does not fit input [5, 4]");
}

TEST_F(Loss, CrossEntropyIndexAndProbabilityTargets) {
  for (DType dt : kFloats) {
    const double t = tol(dt) * 10;
    // Small classes (a thread per element), inner dims, many classes (a block per row).
    const std::vector<std::pair<Shape, Shape>> cases = {
        {{7, 5}, {7}}, {{3, 4, 2, 5}, {3, 2, 5}}, {{6, 300}, {6}}, {{9}, {}}};
    for (const auto& [ishape, tshape] : cases) {
      const int64_t cdim = ishape.size() == 1 ? 0 : 1, c = ishape[cdim];
      Tensor logits = rand(ishape, 10, dt, -4, 4);
      Tensor w = rand({c}, 11, DType::kFloat64, 0.5, 2);
      Tensor tg = tshape.empty() ? Tensor::from_vector<int64_t>({4}, {})
                                 : targets(tshape, 12, c, -100, DType::kInt64);
      Tensor probs = K::softmax(rand(ishape, 13, DType::kFloat64, -2, 2), cdim).to(dt);
      for (const char* red : kReductions)
        for (double ls : {0.0, 0.1})
          for (bool weighted : {false, true}) {
            const std::optional<Tensor> wt = weighted ? std::optional<Tensor>(w) : std::nullopt;
            const std::string what = absl::StrCat(dtype_name(dt), " ", shape_str(ishape), " ", red,
                                                  " ls ", ls, weighted ? " w" : "");
            expect_matches(C::cross_entropy(G(logits), G(tg), G(wt), red, -100, ls),
                           K::cross_entropy(logits, tg, wt, red, -100, ls), t,
                           "cross_entropy index " + what);
            expect_matches(C::cross_entropy(G(logits), G(probs), G(wt), red, -100, ls),
                           K::cross_entropy(logits, probs, wt, red, -100, ls), t,
                           "cross_entropy probs " + what);
          }
    }
  }
  // Masked (-inf) logits: the smoothing term is computed even for label_smoothing 0, as on the CPU.
  Tensor logits = Tensor::from_vector<double>({0, -kInf, 1, 2, 0.5, -1}, {2, 3});
  Tensor tg = Tensor::from_vector<int64_t>({0, 1}, {2});
  for (double ls : {0.0, 0.2})
    expect_matches(C::cross_entropy(G(logits), G(tg), std::nullopt, "none", -100, ls),
                   K::cross_entropy(logits, tg, std::nullopt, "none", -100, ls), 1e-12,
                   "cross_entropy -inf logits");
  expect_error([&] { C::cross_entropy(G(logits), G(tg), std::nullopt, "mean", -100, 1.5); },
               "cross_entropy: label_smoothing 1.5 out of range");
  expect_error(
      [&] {
        C::cross_entropy(G(logits), G(Tensor::from_vector<int64_t>({0, 3}, {2})), std::nullopt, "mean", -100, 0.0);
      },
      "cross_entropy: target 3 out of range for 3 classes");
  expect_error(
      [&] {
        C::cross_entropy(G(logits), G(rand({2, 4}, 1)), std::nullopt, "mean", -100, 0.0);
      },
      "cross_entropy: probability target [2, 4] must have the input's shape [2, 3]");
}

TEST_F(Loss, NllLossBackwardAndTotalWeight) {
  const int64_t n = 9, c = 7;
  Tensor w = rand({c}, 20, DType::kFloat32, 0.5, 2);
  for (DType dt : kFloats)
    for (DType it : {DType::kInt64, DType::kInt32})
      for (const char* red : kReductions)
        for (bool weighted : {false, true}) {
          const std::optional<Tensor> wt = weighted ? std::optional<Tensor>(w) : std::nullopt;
          Tensor tg = targets({n}, 21, c, -100, it);
          const bool none = std::string(red) == "none";
          Tensor g = none ? rand({n}, 22, DType::kFloat32) : Tensor::full({}, 0.7, DType::kFloat64);
          const std::string what = absl::StrCat(dtype_name(dt), " ", red, weighted ? " w" : "");
          const double t = tol(dt) * 4;
          expect_matches(C::nll_loss_backward(G(g), {n, c}, dt, G(tg), G(wt), red, -100, std::nullopt, 0, -1),
                         K::nll_loss_backward(g, {n, c}, dt, tg, wt, red, -100), t, what);
          // Class block [2, 5) of 7 classes with a given total weight.
          expect_matches(C::nll_loss_backward(G(g), {n, 3}, dt, G(tg), G(wt), red, -100, 2.5, 2, c),
                         K::nll_loss_backward(g, {n, 3}, dt, tg, wt, red, -100, 2.5, 2, c), t,
                         what + " block");
        }
  // [C] input with a 0-d target; everything ignored ("mean": divisor 0).
  Tensor t0 = Tensor::from_vector<int64_t>({3}, {});
  Tensor g0 = Tensor::full({}, 1.5, DType::kFloat32);
  expect_matches(
      C::nll_loss_backward(G(g0), {c}, DType::kFloat32, G(t0), std::nullopt, "mean", -100, std::nullopt, 0, -1),
      K::nll_loss_backward(g0, {c}, DType::kFloat32, t0, std::nullopt, "mean", -100), 1e-6, "[C]");
  Tensor ig = Tensor::full({n}, -100.0, DType::kInt64);
  expect_matches(
      C::nll_loss_backward(G(g0), {n, c}, DType::kFloat32, G(ig), std::nullopt, "mean", -100, std::nullopt, 0, -1),
      K::nll_loss_backward(g0, {n, c}, DType::kFloat32, ig, std::nullopt, "mean", -100), 1e-6,
      "all ignored");
  // nll_loss_total_weight.
  Tensor tg = targets({n}, 23, c, -100, DType::kInt64);
  EXPECT_NEAR(C::nll_loss_total_weight(G(tg), G(w), -100), K::nll_loss_total_weight(tg, w, -100),
              1e-5);
  EXPECT_NEAR(C::nll_loss_total_weight(G(tg), std::nullopt, 3),
              K::nll_loss_total_weight(tg, std::nullopt, 3), 0);
  // Errors.
  Tensor bad = Tensor::from_vector<int64_t>({0, 1, 9, 2, 3, 4, 5, 6, 0}, {n});
  expect_error(
      [&] {
        C::nll_loss_backward(G(g0), {n, c}, DType::kFloat32, G(bad), std::nullopt, "sum", -100, std::nullopt, 0, -1);
      },
      "nll_loss_backward: target 9 out of range for 7 classes");
  expect_error(
      [&] {
        C::nll_loss_backward(G(g0), {n, c}, DType::kFloat32, G(tg), std::nullopt, "none", -100, std::nullopt, 0, -1);
      },
      "nll_loss_backward: grad_output float32 [] does not fit reduction 'none'");
  expect_error(
      [&] {
        C::nll_loss_backward(G(g0), {n, c}, DType::kInt64, G(tg), std::nullopt, "sum", -100, std::nullopt, 0, -1);
      },
      "nll_loss_backward: the gradient must be floating");
  expect_error(
      [&] {
        C::nll_loss_backward(G(g0), {n, 3}, DType::kFloat32, G(tg), std::nullopt, "sum", -100,
                             std::nullopt, 5, 7);
      },
      "nll_loss_backward: classes [5, 8) outside [0, 7)");
}

TEST_F(Loss, EmbeddingDenseBackward) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16})
    for (DType it : {DType::kInt64, DType::kInt32}) {
      Tensor idx = randint({4, 6}, 30, 10, it);  // repeated rows on purpose
      Tensor g = rand({4, 6, 5}, 31, dt, -1, 1);
      const std::string what = absl::StrCat(dtype_name(dt), " ", dtype_name(it));
      // Up to 24 additions per element: float accumulation within a few float ulps.
      const double t = dt == DType::kFloat64 ? 1e-12 : std::max(tol(dt), 1e-5);
      expect_matches(C::embedding_dense_backward(G(g), G(idx), 12, -1, 0, -1),
                     K::embedding_dense_backward(g, idx, 12), t, what);
      expect_matches(C::embedding_dense_backward(G(g), G(idx), 12, 3, 0, -1),
                     K::embedding_dense_backward(g, idx, 12, 3), t, what + " padding 3");
      expect_matches(C::embedding_dense_backward(G(g), G(idx), 12, 3, 4, 5),
                     K::embedding_dense_backward(g, idx, 12, 3, 4, 5), t, what + " rows [4, 9)");
      expect_matches(C::embedding_dense_backward(G(g.transpose(0, 1).contiguous()).transpose(0, 1),
                                                 G(idx), 12, -1, 6, -1),
                     K::embedding_dense_backward(g, idx, 12, -1, 6), t, what + " strided, rows 6+");
    }
  Tensor idx = Tensor::from_vector<int64_t>({1, 12, 2}, {3});
  Tensor g = rand({3, 4}, 32);
  expect_error([&] { C::embedding_dense_backward(G(g), G(idx), 12, -1, 0, -1); },
               "embedding_dense_backward: index 12 out of range (accepted: 0 <= index < 12)");
  expect_error([&] { C::embedding_dense_backward(G(g), G(idx.narrow(0, 0, 2)), 12, -1, 0, -1); },
               "embedding_dense_backward: grad_output [3, 4] must be [*indices.shape, D]");
  expect_error([&] { C::embedding_dense_backward(G(g), G(idx), 20, -1, 15, 10); },
               "embedding_dense_backward: rows [15, 25) outside [0, 20)");
  expect_error([&] { C::embedding_dense_backward(G(g.to(DType::kInt64)), G(idx), 20, -1, 0, -1); },
               "embedding_dense_backward: grad_output must be floating");
}

using ShapeOps = CudaTest;

TEST_F(ShapeOps, Stack) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kBool}) {
    Tensor a = rand({3, 4}, 40, dt, -5, 5), b = rand({3, 4}, 41, dt, -5, 5);
    Tensor c = rand({4, 3}, 42, dt, -5, 5);
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      const std::string what = absl::StrCat("stack ", dtype_name(dt), " dim ", dim);
      expect_matches(C::stack({G(a), G(b), G(c).transpose(0, 1)}, dim),
                     K::stack({a, b, c.transpose(0, 1)}, dim), 0, what);
    }
  }
  Tensor z = rand({}, 43);
  expect_matches(C::stack({G(z), G(z)}, 0), K::stack({z, z}), 0, "stack 0-d");
  expect_error([] { C::stack({}, 0); }, "stack: expects a non-empty list of tensors");
  expect_error([] { C::stack({G(rand({3}, 1)), G(rand({4}, 2))}, 0); }, "does not match");
  expect_error(
      [] {
        C::stack({G(rand({3}, 1)), G(rand({3}, 2, DType::kFloat64))}, 0);
      },
      "(accepted: equal shapes and dtypes)");
  expect_error([] { C::stack({G(rand({3}, 1))}, 2); }, "stack");
}

TEST_F(ShapeOps, IndexSelect) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kBool})
    for (DType it : {DType::kInt64, DType::kInt32}) {
      Tensor x =
          dt == DType::kBool ? K::gt(rand({5, 6, 7}, 50), 0.0) : rand({5, 6, 7}, 50, dt, -9, 9);
      for (int64_t dim : {0, 1, 2, -1}) {
        const int64_t size = x.size(dim);
        Tensor idx = randint({11}, 51, size, it);  // repeats on purpose
        const std::string what =
            absl::StrCat("index_select ", dtype_name(dt), " ", dtype_name(it), " dim ", dim);
        expect_matches(C::index_select(G(x), dim, G(idx)), K::index_select(x, dim, idx), 0, what);
        Tensor xt = x.transpose(0, 2);  // strided on the device
        Tensor it2 = randint({4}, 52, xt.size(dim), it);
        expect_matches(C::index_select(G(x).transpose(0, 2), dim, G(it2)),
                       K::index_select(xt, dim, it2), 0, what + " strided");
        Tensor one = Tensor::from_vector<int64_t>({size - 1}, {}).to(it);
        expect_matches(C::index_select(G(x), dim, G(one)), K::index_select(x, dim, one), 0,
                       what + " 0-d index");
        Tensor none = Tensor::zeros({0}, it);
        expect_matches(C::index_select(G(x), dim, G(none)), K::index_select(x, dim, none), 0,
                       what + " empty index");
      }
    }
  Tensor x = rand({4, 3}, 52);
  expect_error(
      [&] {
        C::index_select(G(x), 0, G(Tensor::from_vector<int64_t>({0, 4}, {2})));
      },
      "index_select: index 4 out of range for dim 0 of [4, 3] (accepted: 0 to 3)");
  expect_error([&] { C::index_select(G(x), 1, G(Tensor::from_vector<int64_t>({-1}, {1}))); },
               "index_select: index -1 out of range for dim 1");
  expect_error(
      [&] {
        C::index_select(G(x), 0, G(Tensor::zeros({2, 2}, DType::kInt64)));
      },
      "index_select: index must be a 0-d or 1-d int64/int32 tensor, got int64 [2, 2]");
  expect_error([&] { C::index_select(G(x), 0, G(Tensor::zeros({2}, DType::kFloat32))); },
               "index_select: index must be a 0-d or 1-d int64/int32 tensor, got float32");
  expect_error([&] { C::index_select(G(rand({}, 1)), 0, G(Tensor::zeros({1}, DType::kInt64))); },
               "index_select: input must have at least 1 dim");
  // An empty input still checks its indices, as on the CPU.
  expect_error(
      [&] {
        C::index_select(G(Tensor::zeros({0, 3})), 1, G(Tensor::from_vector<int64_t>({5}, {1})));
      },
      "index_select: index 5 out of range");
}

// gather and scatter_add against the CPU kernels: every dim, an index smaller than self (and src)
// in the other dims with repeats, int32 and int64 indices, floating and integer dtypes; a block of a
// sharded dim (offset, full: indices of other blocks give 0 / are dropped); a 0-d self; bad indices.
TEST_F(ShapeOps, GatherScatterAdd) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64, DType::kInt32})
    for (DType it : {DType::kInt64, DType::kInt32}) {
      const Tensor self = rand({5, 6, 7}, 53, dt, -9, 9);
      for (int64_t dim : {0, 1, 2, -1}) {
        const std::string what = absl::StrCat(dtype_name(dt), " ", dtype_name(it), " dim ", dim);
        const int64_t d = dim < 0 ? dim + 3 : dim;
        Shape is{4, 5, 6};
        is[d] = 9;  // longer than self along dim: repeats
        const Tensor idx = randint(is, 54, self.size(d), it);
        expect_matches(C::gather(G(self), dim, G(idx), 0, -1), K::gather(self, dim, idx), 0, "gather " + what);
        Shape ss = is;
        ss[0] += 1;  // src larger than index
        const Tensor src = rand(ss, 55, dt, -9, 9);
        expect_matches(C::scatter_add(G(self), dim, G(idx), G(src), 0, -1), K::scatter_add(self, dim, idx, src),
                       0, "scatter_add " + what);
        // self as the block [2, 2 + size) of a dim of size + 4.
        const int64_t full = self.size(d) + 4;
        const Tensor wide = randint(is, 56, full, it);
        expect_matches(C::gather(G(self), dim, G(wide), 2, full), K::gather(self, dim, wide, 2, full), 0,
                       "gather block " + what);
        expect_matches(C::scatter_add(G(self), dim, G(wide), G(src), 2, full),
                       K::scatter_add(self, dim, wide, src, 2, full), 0, "scatter_add block " + what);
      }
    }
  const Tensor s = Tensor::full({}, 3.0, DType::kFloat64), i0 = Tensor::full({}, 0.0, DType::kInt64);
  expect_matches(C::gather(G(s), 0, G(i0), 0, -1), K::gather(s, 0, i0), 0, "gather 0-d");
  expect_matches(C::scatter_add(G(s), 0, G(i0), G(s), 0, -1), K::scatter_add(s, 0, i0, s), 0, "scatter_add 0-d");
  const Tensor x = rand({4, 3}, 57);
  const Tensor bad = Tensor::from_vector<int64_t>({0, 4}, {2, 1});
  expect_error([&] { C::gather(G(x), 0, G(bad), 0, -1); },
               "gather: index 4 is out of range for a dim of size 4 (accepted: indices in [0, 4))");
  expect_error([&] { K::scatter_add(G(x), 0, G(bad), G(rand({2, 1}, 58)), 0, -1); },
               "scatter_add: index 4 is out of range for a dim of size 4");
}

}  // namespace
}  // namespace dtensor::cuda::testing
