// The CUDA flex_attention forward and backward against the CPU kernel (itself checked against SDPA with dense
// masks in tests/kernels/flex_attention_test.cc) on the same data; skipped without a GPU.
#include "kernels/cpu/flex_attention.h"

#include "kernels/cuda/kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace dtensor::cuda::testing {
namespace {

class FlexAttentionCuda : public CudaTest {};

void expect_close(const Tensor& got, const Tensor& want, double tol) {
  const auto g = H(got).to_vector<double>(), w = want.to_vector<double>();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], tol) << "at " << i;
}

TEST_F(FlexAttentionCuda, MatchesTheCpuKernelOnEveryMaskAndModifier) {
  const Tensor q = rand({2, 3, 70, 16}, 1), k = rand({2, 3, 70, 16}, 2), v = rand({2, 3, 70, 8}, 3);
  std::vector<int64_t> doc;
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 70; ++i) doc.push_back((i + 7 * r) / 23);
  kernels::FlexMask m;
  m.is_causal = true;
  m.window = 40;
  m.prefix_length = 3;
  m.document_ids = Tensor::from_vector(doc, {2, 70});
  kernels::FlexScoreMod s;
  s.alibi_slopes = rand({3}, 4);
  s.soft_cap = 2.5;
  const Tensor want = kernels::flex_attention(q, k, v, m, s, std::nullopt, 16, std::nullopt, 0, 0);
  kernels::FlexMask gm = m;
  gm.document_ids = G(*m.document_ids);
  kernels::FlexScoreMod gs = s;
  gs.alibi_slopes = G(*s.alibi_slopes);
  expect_close(kernels::cuda::flex_attention(G(q), G(k), G(v), gm, gs, std::nullopt, 16, std::nullopt, 0, 0), want,
               2e-5);
  // A precomputed block mask, offsets (global positions) and the dispatch from the CPU entry.
  const Tensor tiles = kernels::create_block_mask(m, 30, 50, 16, 40, 20);
  const Tensor q2 = rand({2, 3, 30, 16}, 5), k2 = rand({2, 3, 50, 16}, 6), v2 = rand({2, 3, 50, 8}, 7);
  const Tensor want2 = kernels::flex_attention(q2, k2, v2, m, s, tiles, 16, 0.3, 40, 20);
  expect_close(kernels::flex_attention(G(q2), G(k2), G(v2), gm, gs, G(tiles), 16, 0.3, 40, 20), want2, 2e-5);
}

// The backward against the CPU kernel's on the same data: every mask and modifier, offsets with a
// precomputed block mask whose first tile row is empty (rows that see no key), and float64 inputs
// (computed in float32 on CUDA).
TEST_F(FlexAttentionCuda, BackwardMatchesTheCpuKernel) {
  const Tensor q = rand({2, 3, 70, 16}, 11), k = rand({2, 3, 70, 16}, 12), v = rand({2, 3, 70, 8}, 13),
               g = rand({2, 3, 70, 8}, 14);
  std::vector<int64_t> doc;
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 70; ++i) doc.push_back((i + 5 * r) / 19);
  kernels::FlexMask m;
  m.is_causal = true;
  m.window = 33;
  m.prefix_length = 2;
  m.document_ids = Tensor::from_vector(doc, {2, 70});
  kernels::FlexScoreMod s;
  s.alibi_slopes = rand({3}, 15);
  s.soft_cap = 1.5;
  kernels::FlexMask gm = m;
  gm.document_ids = G(*m.document_ids);
  kernels::FlexScoreMod gs = s;
  gs.alibi_slopes = G(*s.alibi_slopes);
  const auto check = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         const std::optional<Tensor>& tiles, std::optional<double> scale, int64_t qo, int64_t ko) {
    const Tensor out = kernels::flex_attention(q, k, v, m, s, tiles, 16, scale, qo, ko);
    const kernels::AttentionGrads want =
        kernels::flex_attention_backward(g, q, k, v, out, m, s, tiles, 16, scale, qo, ko);
    std::optional<Tensor> gt;
    if (tiles) gt = G(*tiles);
    const kernels::AttentionGrads got =
        kernels::cuda::flex_attention_backward(G(g), G(q), G(k), G(v), G(out), gm, gs, gt, 16, scale, qo, ko);
    for (const Tensor* t : {&got.query, &got.key, &got.value}) EXPECT_TRUE(t->device().is_cuda());
    expect_close(got.query, want.query, 1e-4);
    expect_close(got.key, want.key, 1e-4);
    expect_close(got.value, want.value, 1e-4);
    // The CPU entry point with device tensors lands on the same kernel.
    const kernels::AttentionGrads routed =
        kernels::flex_attention_backward(G(g), G(q), G(k), G(v), G(out), gm, gs, gt, 16, scale, qo, ko);
    expect_close(routed.key, want.key, 1e-4);
  };
  check(q, k, v, g, std::nullopt, std::nullopt, 0, 0);
  Tensor tiles = kernels::create_block_mask(m, 30, 50, 16, 40, 20);
  for (int64_t j = 0; j < tiles.size(2); ++j) tiles.data<int32_t>()[j] = 0;
  const Tensor q2 = rand({2, 3, 30, 16}, 16), k2 = rand({2, 3, 50, 16}, 17), v2 = rand({2, 3, 50, 8}, 18),
               g2 = rand({2, 3, 30, 8}, 19);
  check(q2, k2, v2, g2, tiles, 0.3, 40, 20);
  check(q.to(DType::kFloat64), k.to(DType::kFloat64), v.to(DType::kFloat64), g.to(DType::kFloat64), std::nullopt,
        std::nullopt, 0, 0);
}

}  // namespace
}  // namespace dtensor::cuda::testing
