// CUDA matrix products (cuBLASLt) and scaled_dot_product_attention (the float32 kernel and cuDNN's
// fused path) against the CPU kernels.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace dtensor::cuda::testing {
namespace {

namespace K = ::dtensor::kernels;
namespace C = ::dtensor::kernels::cuda;

// Products of k terms: the tolerance grows with k (bfloat16 rounds the result only: fp32 acc).
double mm_tol(DType dt, int64_t k) {
  switch (dt) {
    case DType::kFloat64:
      return 1e-11 * k;
    case DType::kFloat32:
      return C::allow_tf32() ? 2e-3 * std::sqrt(double(k)) : 1e-5 * std::sqrt(double(k));
    default:
      return tol(dt) * 2;
  }
}

using Matmul = CudaTest;

TEST_F(Matmul, MmBmmAddmmLinearMatmulInEveryDtype) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    const std::string d = dtype_name(dt);
    Tensor a = rand({37, 64}, 80, dt), b = rand({64, 29}, 81, dt);
    const double t = mm_tol(dt, 64);
    expect_matches(C::mm(G(a), G(b)), K::mm(a, b), t, "mm " + d);
    // Transposed operands go to cuBLAS with transpose flags; a strided one is copied.
    Tensor at = rand({64, 37}, 82, dt).transpose(0, 1), bt = rand({29, 64}, 83, dt).transpose(0, 1);
    expect_matches(C::mm(G(at), G(bt)), K::mm(at, bt), t, "mm transposed " + d);
    Tensor wide = rand({37, 128}, 84, dt);
    expect_matches(C::mm(G(wide).slice(1, 0, 128, 2), G(b)), K::mm(wide.slice(1, 0, 128, 2), b), t,
                   "mm strided " + d);
    Tensor x = rand({5, 37, 64}, 85, dt), y = rand({5, 64, 29}, 86, dt);
    expect_matches(C::bmm(G(x), G(y)), K::bmm(x, y), t, "bmm " + d);
    Tensor bias = rand({29}, 87, dt);
    expect_matches(C::addmm(G(bias), G(a), G(b), 0.5, 2.0), K::addmm(bias, a, b, 0.5, 2.0), t * 4,
                   "addmm " + d);
    Tensor w = rand({29, 64}, 88, dt);
    expect_matches(C::linear(G(x), G(w), G(bias)), K::linear(x, w, bias), t, "linear " + d);
    expect_matches(C::linear(G(a.select(0, 3)), G(w), std::nullopt), K::linear(a.select(0, 3), w), t,
                   "linear 1-d " + d);
    Tensor p = rand({2, 1, 7, 64}, 89, dt), q = rand({3, 64, 6}, 90, dt);
    expect_matches(C::matmul(G(p), G(q)), K::matmul(p, q), t, "matmul broadcast " + d);
    expect_matches(C::matmul(G(b.select(1, 0)), G(b.select(1, 1))),
                   K::matmul(b.select(1, 0), b.select(1, 1)), t * 8, "dot " + d);
    expect_matches(C::matmul(G(x), G(b)), K::matmul(x, b), t, "matmul 3-d @ 2-d " + d);
  }
  Tensor z = rand({4, 0}, 91), zb = rand({0, 3}, 92);
  expect_matches(C::mm(G(z), G(zb)), K::mm(z, zb), 0);
  EXPECT_THROW(C::mm(G(rand({2, 3}, 1)), G(rand({2, 3}, 2))), Error);
  EXPECT_THROW(C::mm(G(rand({2, 3}, 1)), G(rand({3, 2}, 2, DType::kFloat64))), Error);
}

// grouped_mm on the GPU against the CPU kernel, every form, with an empty group and trailing rows.
TEST_F(Matmul, GroupedMmEveryFormMatchesCpu) {
  auto offs = [](std::vector<int32_t> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); };
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    const double t = mm_tol(dt, 32);
    Tensor a = rand({40, 32}, 93, dt), b = rand({3, 32, 24}, 94, dt), o = offs({10, 10, 36});
    expect_matches(C::grouped_mm(G(a), G(b), G(o)), K::grouped_mm(a, b, o), t, "rows");
    expect_matches(C::grouped_mm(G(a), G(b), o), K::grouped_mm(a, b, o), t, "rows, offs on the host");
    Tensor at = rand({32, 40}, 95, dt), c = rand({40, 24}, 96, dt);
    expect_matches(C::grouped_mm(G(at), G(c), G(o)), K::grouped_mm(at, c, o), t, "contraction");
    Tensor a3 = rand({3, 16, 32}, 97, dt), bc = rand({32, 40}, 98, dt);
    expect_matches(C::grouped_mm(G(a3), G(bc), G(o)), K::grouped_mm(a3, bc, o), t, "cols");
    Tensor b3 = rand({3, 32, 8}, 99, dt);
    expect_matches(C::grouped_mm(G(a3), G(b3), std::nullopt), K::grouped_mm(a3, b3, std::nullopt), t, "batched");
  }
  EXPECT_THROW(C::grouped_mm(G(rand({6, 4}, 1)), G(rand({2, 4, 3}, 2)), offs({4, 2})), Error);
}

TEST_F(Matmul, Tf32IsOptIn) {
  Tensor a = rand({128, 256}, 93), b = rand({256, 64}, 94);
  EXPECT_FALSE(C::allow_tf32());
  expect_matches(C::mm(G(a), G(b)), K::mm(a, b), 1e-4);
  C::set_allow_tf32(true);
  expect_matches(C::mm(G(a), G(b)), K::mm(a, b), 5e-2);
  C::set_allow_tf32(false);
}

using Attention = CudaTest;

struct AttnCase {
  Shape q, k, v;
  bool causal;
  int mask;  // 0 none, 1 bool, 2 float
  int64_t query_offset;
};

TEST_F(Attention, MathKernelForwardAndBackward) {
  const std::vector<AttnCase> cases = {
      {{2, 3, 17, 16}, {2, 3, 17, 16}, {2, 3, 17, 16}, false, 0, 0},
      {{2, 3, 40, 32}, {2, 3, 40, 32}, {2, 3, 40, 24}, true, 0, 0},
      {{4, 33, 8}, {4, 70, 8}, {4, 70, 40}, true, 0, 0},   // L != S
      {{2, 9, 16}, {2, 12, 16}, {2, 12, 16}, true, 0, 5},  // sharded query rows
      {{2, 2, 10, 8}, {2, 2, 15, 8}, {2, 2, 15, 8}, false, 1, 0},
      {{2, 2, 10, 8}, {2, 2, 15, 8}, {2, 2, 15, 8}, false, 2, 0},
  };
  for (const AttnCase& c : cases) {
    Tensor q = rand(c.q, 100), k = rand(c.k, 101), v = rand(c.v, 102);
    std::optional<Tensor> mask;
    if (c.mask == 1) {
      Tensor m = K::gt(rand({c.q[c.q.size() - 2], c.k[c.k.size() - 2]}, 103), 0.2);
      m.select(0, 1).fill_(0);  // a fully masked row: zeros
      mask = m;
    } else if (c.mask == 2) {
      mask =
          rand({c.q[0], 1, c.q[c.q.size() - 2], c.k[c.k.size() - 2]}, 104, DType::kFloat32, -3, 1);
    }
    const std::string w = absl::StrCat(shape_str(c.q), c.causal ? " causal" : "", " mask ", c.mask,
                                       " offset ", c.query_offset);
    std::optional<Tensor> gmask = mask ? std::optional<Tensor>(G(*mask)) : std::nullopt;
    Tensor want =
        K::scaled_dot_product_attention(q, k, v, mask, c.causal, std::nullopt, c.query_offset);
    auto got =
        C::scaled_dot_product_attention_with_lse(G(q), G(k), G(v), gmask, c.causal, std::nullopt,
                                                 c.query_offset, C::AttentionBackend::kMath);
    expect_matches(got.out, want, 1e-5, "forward " + w);
    Tensor g = rand(want.sizes(), 105);
    auto wg = K::scaled_dot_product_attention_backward(g, q, k, v, want, c.causal, std::nullopt,
                                                       mask, c.query_offset);
    auto gg = C::scaled_dot_product_attention_backward(G(g), G(q), G(k), G(v), got.out, c.causal,
                                                       std::nullopt, gmask, c.query_offset, got.lse,
                                                       C::AttentionBackend::kMath);
    expect_matches(gg.query, wg.query, 1e-4, "dq " + w);
    expect_matches(gg.key, wg.key, 1e-4, "dk " + w);
    expect_matches(gg.value, wg.value, 1e-4, "dv " + w);
  }
  // bfloat16 through the float32 kernel; a custom scale; lse recomputed when absent.
  Tensor q = rand({2, 4, 19, 16}, 110, DType::kBFloat16),
         k = rand({2, 4, 19, 16}, 111, DType::kBFloat16);
  Tensor v = rand({2, 4, 19, 16}, 112, DType::kBFloat16);
  Tensor want = K::scaled_dot_product_attention(q, k, v, std::nullopt, true, 0.3);
  Tensor got = C::scaled_dot_product_attention(G(q), G(k), G(v), std::nullopt, true, 0.3, 0,
                                               C::AttentionBackend::kMath);
  expect_matches(got, want, 2e-2, "bf16 math");
  auto wg = K::scaled_dot_product_attention_backward(want, q, k, v, want, true, 0.3);
  auto gg =
      C::scaled_dot_product_attention_backward(got, G(q), G(k), G(v), got, true, 0.3, std::nullopt,
                                               0, std::nullopt, C::AttentionBackend::kMath);
  expect_matches(gg.query, wg.query, 3e-2, "bf16 math dq");
  EXPECT_THROW(C::scaled_dot_product_attention(G(q), G(k), G(v),
                                               G(Tensor::zeros({19, 19}, DType::kBool)), true, std::nullopt, 0),
               Error);
}

// float64 runs in float64, as on the CPU: a float32 kernel misses 1e-12 by orders of magnitude (the
// sharded-vs-one-rank training check over cp needs 1e-9); lse comes back as float64.
TEST_F(Attention, MathKernelFloat64IsFloat64) {
  for (int c = 0; c < 3; ++c) {  // no mask, causal, an additive float64 mask
    const bool causal = c == 1;
    Tensor q = rand({2, 3, 21, 16}, 120, DType::kFloat64), k = rand({2, 3, 21, 16}, 121, DType::kFloat64);
    Tensor v = rand({2, 3, 21, 12}, 122, DType::kFloat64);
    std::optional<Tensor> m, gm;
    if (c == 2) {
      m = rand({21, 21}, 123, DType::kFloat64, -2, 1);
      gm = G(*m);
    }
    const std::string w = absl::StrCat("float64 case ", c);
    Tensor want = K::scaled_dot_product_attention(q, k, v, m, causal);
    auto got = C::scaled_dot_product_attention_with_lse(G(q), G(k), G(v), gm, causal, std::nullopt, 0,
                                                        C::AttentionBackend::kMath);
    EXPECT_EQ(got.lse.dtype(), DType::kFloat64) << w;
    expect_matches(got.out, want, 1e-12, "forward " + w);
    if (!m) expect_matches(got.lse, K::scaled_dot_product_attention_with_lse(q, k, v, causal).lse, 1e-12, "lse " + w);
    Tensor g = rand(want.sizes(), 124, DType::kFloat64);
    auto wg = K::scaled_dot_product_attention_backward(g, q, k, v, want, causal, std::nullopt, m);
    auto gg = C::scaled_dot_product_attention_backward(G(g), G(q), G(k), G(v), got.out, causal, std::nullopt,
                                                       gm, 0, got.lse, C::AttentionBackend::kMath);
    expect_matches(gg.query, wg.query, 1e-11, "dq " + w);
    expect_matches(gg.key, wg.key, 1e-11, "dk " + w);
    expect_matches(gg.value, wg.value, 1e-11, "dv " + w);
  }
}

// Ring attention's block merge and block weight against the CPU kernels, with rows that no key has
// reached yet (lse -inf) and blocks that add nothing (lse_b -inf).
TEST_F(Attention, MergeAndBlockWeightMatchCpu) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor out = rand({2, 5, 7}, 130, dt), out_b = rand({2, 5, 7}, 131, dt);
    std::vector<double> l = rand({10}, 132, DType::kFloat64, -3, 3).to_vector<double>();
    std::vector<double> lb = rand({10}, 133, DType::kFloat64, -3, 3).to_vector<double>();
    l[1] = -kInf, l[4] = -kInf, lb[4] = -kInf, lb[7] = -kInf;
    Tensor lse = Tensor::from_vector(l, {2, 5}).to(dt), lse_b = Tensor::from_vector(lb, {2, 5}).to(dt);
    out.select(1, 1).fill_(0);  // a row no key reached has out 0
    auto [wo, wl] = K::merge_attention(out, lse, out_b, lse_b);
    auto [go, gl] = K::merge_attention(G(out), G(lse), G(out_b), G(lse_b));  // dispatched to CUDA
    const double t = dt == DType::kFloat64 ? 1e-13 : 1e-6;
    expect_matches(go, wo, t, "merge_attention out " + std::string(dtype_name(dt)));
    expect_matches(gl, wl, t, "merge_attention lse " + std::string(dtype_name(dt)));
    expect_matches(K::attention_block_weight(G(lse_b), G(lse)), K::attention_block_weight(lse_b, lse), t,
                   "attention_block_weight " + std::string(dtype_name(dt)));
  }
  EXPECT_THROW(C::merge_attention(G(rand({2, 3}, 1)), G(rand({2}, 2)), G(rand({2, 4}, 3)), G(rand({2}, 4))),
               Error);
  EXPECT_THROW(C::attention_block_weight(G(rand({3}, 1, DType::kBFloat16)), G(rand({3}, 2, DType::kBFloat16))),
               Error);
}

TEST_F(Attention, CudnnFusedAttentionBf16AndFp16) {
  if (!C::cudnn_attention_built()) GTEST_SKIP() << "built without cuDNN's C++ frontend";
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    for (bool causal : {false, true}) {
      Tensor q = rand({2, 4, 128, 64}, 120, dt), k = rand({2, 4, 96, 64}, 121, dt);
      Tensor v = rand({2, 4, 96, 64}, 122, dt);
      const std::string w = absl::StrCat(dtype_name(dt), causal ? " causal" : "");
      // The reference: the CPU kernel in float32 on the same (rounded) inputs.
      Tensor want = K::scaled_dot_product_attention(q.to(DType::kFloat32), k.to(DType::kFloat32),
                                                    v.to(DType::kFloat32), std::nullopt, causal);
      auto got = C::scaled_dot_product_attention_with_lse(
          G(q), G(k), G(v), std::nullopt, causal, std::nullopt, 0, C::AttentionBackend::kCudnn);
      expect_matches(C::to(got.out, DType::kFloat32), want, 2e-2, "cudnn forward " + w);
      Tensor g = rand(want.sizes(), 123, dt);
      auto wg = K::scaled_dot_product_attention_backward(
          g.to(DType::kFloat32), q.to(DType::kFloat32), k.to(DType::kFloat32),
          v.to(DType::kFloat32), want, causal);
      auto gg = C::scaled_dot_product_attention_backward(G(g), G(q), G(k), G(v), got.out, causal,
                                                         std::nullopt, std::nullopt, 0, got.lse,
                                                         C::AttentionBackend::kCudnn);
      expect_matches(C::to(gg.query, DType::kFloat32), wg.query, 5e-2, "cudnn dq " + w);
      expect_matches(C::to(gg.key, DType::kFloat32), wg.key, 5e-2, "cudnn dk " + w);
      expect_matches(C::to(gg.value, DType::kFloat32), wg.value, 5e-2, "cudnn dv " + w);
    }
  }
  // What cuDNN does not take is named.
  Tensor q = G(rand({1, 2, 8, 12}, 1, DType::kBFloat16));
  EXPECT_THROW(C::scaled_dot_product_attention(q, q, q, std::nullopt, false, std::nullopt, 0,
                                               C::AttentionBackend::kCudnn),
               Error);
}

}  // namespace
}  // namespace dtensor::cuda::testing
