// The CUDA flex_attention forward against the CPU kernel (itself checked against SDPA with dense
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

}  // namespace
}  // namespace dtensor::cuda::testing
