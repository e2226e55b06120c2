// Block-sparse flex_attention against dense attention on the CPU for document masks of several
// densities: B = 1, H = 4, L = S = 2048, E = Ev = 64, float32, documents of equal length D (a
// packed batch), with and without the causal mask. Dense: the SDPA kernel with the same mask as an
// explicit bool [L, S] tensor (every score computed). Flex: the block mask built once (timed
// separately) and passed in, tiles of 64. Counters: density = visible pairs / L*S, tiles = non-empty
// tiles / all tiles. Run: bazel run -c opt //bench:flex_attention_bench
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/flex_attention.h"

namespace dtensor::kernels {
namespace {

constexpr int64_t kH = 4, kN = 2048, kE = 64, kBlock = 64;

Tensor randn(const Shape& s, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(numel(s)));
  uint64_t x = seed;
  for (float& e : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    e = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2 - 1);
  }
  return Tensor::from_vector(v, s);
}

FlexMask documents(int64_t doc_len, bool causal) {
  std::vector<int64_t> ids(kN);
  for (int64_t i = 0; i < kN; ++i) ids[i] = i / doc_len;
  FlexMask m;
  m.is_causal = causal;
  m.document_ids = Tensor::from_vector(ids, {kN});
  return m;
}

Tensor dense_mask(int64_t doc_len, bool causal) {
  Tensor t = Tensor::zeros({kN, kN}, DType::kBool);
  bool* p = t.data<bool>();
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t j = 0; j < kN; ++j) p[i * kN + j] = i / doc_len == j / doc_len && (!causal || j <= i);
  return t;
}

void counters(benchmark::State& state, int64_t doc_len, bool causal) {
  const Tensor m = dense_mask(doc_len, causal), tiles = create_block_mask(documents(doc_len, causal), kN, kN, kBlock);
  int64_t seen = 0, live = 0;
  for (bool b : m.to_vector<bool>()) seen += b;
  for (int32_t t : tiles.to_vector<int32_t>()) live += t != kEmptyTile;
  state.counters["density"] = static_cast<double>(seen) / static_cast<double>(kN * kN);
  state.counters["tiles"] = static_cast<double>(live) / static_cast<double>(tiles.numel());
}

// Args: document length, causal.
void BM_Dense(benchmark::State& state) {
  const int64_t d = state.range(0);
  const bool causal = state.range(1) != 0;
  const Tensor q = randn({1, kH, kN, kE}, 1), k = randn({1, kH, kN, kE}, 2), v = randn({1, kH, kN, kE}, 3);
  const Tensor mask = dense_mask(d, causal);
  for (auto _ : state) benchmark::DoNotOptimize(scaled_dot_product_attention(q, k, v, mask, false));
  counters(state, d, causal);
}

void BM_Flex(benchmark::State& state) {
  const int64_t d = state.range(0);
  const bool causal = state.range(1) != 0;
  const Tensor q = randn({1, kH, kN, kE}, 1), k = randn({1, kH, kN, kE}, 2), v = randn({1, kH, kN, kE}, 3);
  const FlexMask m = documents(d, causal);
  const Tensor tiles = create_block_mask(m, kN, kN, kBlock);
  for (auto _ : state)
    benchmark::DoNotOptimize(flex_attention(q, k, v, m, {}, tiles, kBlock, std::nullopt, 0, 0));
  counters(state, d, causal);
}

void BM_FlexBackward(benchmark::State& state) {
  const int64_t d = state.range(0);
  const bool causal = state.range(1) != 0;
  const Tensor q = randn({1, kH, kN, kE}, 1), k = randn({1, kH, kN, kE}, 2), v = randn({1, kH, kN, kE}, 3),
               g = randn({1, kH, kN, kE}, 4);
  const FlexMask m = documents(d, causal);
  const Tensor tiles = create_block_mask(m, kN, kN, kBlock);
  const Tensor out = flex_attention(q, k, v, m, {}, tiles, kBlock, std::nullopt, 0, 0);
  for (auto _ : state)
    benchmark::DoNotOptimize(flex_attention_backward(g, q, k, v, out, m, {}, tiles, kBlock, std::nullopt, 0, 0));
  counters(state, d, causal);
}

void BM_DenseBackward(benchmark::State& state) {
  const int64_t d = state.range(0);
  const bool causal = state.range(1) != 0;
  const Tensor q = randn({1, kH, kN, kE}, 1), k = randn({1, kH, kN, kE}, 2), v = randn({1, kH, kN, kE}, 3),
               g = randn({1, kH, kN, kE}, 4);
  const Tensor mask = dense_mask(d, causal);
  const Tensor out = scaled_dot_product_attention(q, k, v, mask, false);
  for (auto _ : state)
    benchmark::DoNotOptimize(scaled_dot_product_attention_backward(g, q, k, v, out, false, std::nullopt, mask));
  counters(state, d, causal);
}

void BM_CreateBlockMask(benchmark::State& state) {
  const FlexMask m = documents(state.range(0), state.range(1) != 0);
  for (auto _ : state) benchmark::DoNotOptimize(create_block_mask(m, kN, kN, kBlock));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t causal : {0, 1})
    for (int64_t d : {2048, 512, 128}) b->Args({d, causal});
  b->Unit(benchmark::kMillisecond)->MinTime(0.5);
}

BENCHMARK(BM_Dense)->Apply(Args);
BENCHMARK(BM_Flex)->Apply(Args);
BENCHMARK(BM_DenseBackward)->Apply(Args);
BENCHMARK(BM_FlexBackward)->Apply(Args);
BENCHMARK(BM_CreateBlockMask)->Apply(Args);

}  // namespace
}  // namespace dtensor::kernels

BENCHMARK_MAIN();
