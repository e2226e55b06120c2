// flex_attention against two independent references: the SDPA kernel with an explicit dense mask
// (bool, or additive with -inf for ALiBi) built here from the mask's definition, and a naive
// double-loop attention for the soft cap; the backward against finite differences.
#include "kernels/cpu/flex_attention.h"

#include <cmath>
#include <functional>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::expect_near;
using testing::rand;
using testing::V;
constexpr DType kF64 = DType::kFloat64;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The mask of flex_attention.h written out again, at global positions.
bool visible(const FlexMask& m, const std::vector<int64_t>& doc, int64_t qp, int64_t kp) {
  if (!doc.empty() && doc[qp] != doc[kp]) return false;
  if (kp < m.prefix_length) return true;
  if (m.is_causal && kp > qp) return false;
  return m.window < 0 || std::abs(qp - kp) <= m.window;
}

// Dense additive bias [B, H, L, S]: ALiBi slope * (kp - qp) where visible, -inf elsewhere.
// docs: one row of document ids per batch index (or empty).
Tensor dense_bias(const FlexMask& m, const std::vector<std::vector<int64_t>>& docs, const std::vector<double>& slopes,
                  int64_t B, int64_t H, int64_t L, int64_t S, int64_t q_off = 0, int64_t kv_off = 0) {
  std::vector<double> bias;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j) {
          const int64_t qp = q_off + i, kp = kv_off + j;
          const std::vector<int64_t> none;
          const auto& doc = docs.empty() ? none : docs[docs.size() == 1 ? 0 : b];
          const double a = slopes.empty() ? 0 : slopes[h] * static_cast<double>(kp - qp);
          bias.push_back(visible(m, doc, qp, kp) ? a : kNegInf);
        }
  return Tensor::from_vector(bias, {B, H, L, S});
}

Tensor doc_tensor(const std::vector<std::vector<int64_t>>& docs) {
  std::vector<int64_t> flat;
  for (const auto& d : docs) flat.insert(flat.end(), d.begin(), d.end());
  if (docs.size() == 1) return Tensor::from_vector(flat, {static_cast<int64_t>(flat.size())});
  return Tensor::from_vector(flat, {static_cast<int64_t>(docs.size()), static_cast<int64_t>(docs[0].size())});
}

struct Case {
  FlexMask mask;
  std::vector<std::vector<int64_t>> docs;
  std::vector<double> slopes;
  int64_t L = 11, S = 11, block = 4;
};

// flex_attention on [2, 2, L, E] inputs equals SDPA with the dense bias.
void expect_matches_sdpa(Case c) {
  const int64_t B = 2, H = 2, E = 5;
  const Tensor q = rand({B, H, c.L, E}, 1, kF64), k = rand({B, H, c.S, E}, 2, kF64), v = rand({B, H, c.S, 3}, 3, kF64);
  if (!c.docs.empty()) c.mask.document_ids = doc_tensor(c.docs);
  FlexScoreMod mod;
  if (!c.slopes.empty()) mod.alibi_slopes = Tensor::from_vector(c.slopes, {H});
  const Tensor got = flex_attention(q, k, v, c.mask, mod, std::nullopt, c.block, std::nullopt, 0, 0);
  const Tensor want =
      scaled_dot_product_attention(q, k, v, dense_bias(c.mask, c.docs, c.slopes, B, H, c.L, c.S), false);
  expect_near(V(got), V(want), 1e-12);
}

TEST(FlexAttention, CausalMatchesSdpa) {
  Case c;
  c.mask.is_causal = true;
  expect_matches_sdpa(c);
}

TEST(FlexAttention, SlidingWindowMatchesSdpa) {
  Case c;
  c.mask.is_causal = true;
  c.mask.window = 3;
  expect_matches_sdpa(c);
  c.mask.is_causal = false;  // both sides
  expect_matches_sdpa(c);
}

TEST(FlexAttention, DocumentMaskMatchesSdpa) {
  Case c;
  c.docs = {{0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2}, {0, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3}};
  expect_matches_sdpa(c);
  c.mask.is_causal = true;
  expect_matches_sdpa(c);
  c.docs = {{5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 9}};  // one row for every batch entry
  expect_matches_sdpa(c);
}

TEST(FlexAttention, PrefixLmMatchesSdpa) {
  Case c;
  c.mask.is_causal = true;
  c.mask.prefix_length = 6;
  expect_matches_sdpa(c);
}

TEST(FlexAttention, AlibiMatchesSdpa) {
  Case c;
  c.mask.is_causal = true;
  c.slopes = {0.5, 0.125};
  c.L = 9;
  c.S = 13;
  expect_matches_sdpa(c);
}

std::vector<double> scaled(std::vector<double> v, double f) {
  for (double& x : v) x *= f;
  return v;
}

// Naive attention in double with the soft cap: s = cap * tanh((scale q.k + bias) / cap).
std::vector<double> naive(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, double cap) {
  const int64_t B = q.size(0) * q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  const auto qv = V(q), kv = V(k), vv = V(v), bv = V(bias);
  std::vector<double> out(B * L * Ev, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(S);
      double mx = kNegInf;
      for (int64_t j = 0; j < S; ++j) {
        double d = 0;
        for (int64_t e = 0; e < E; ++e) d += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
        const double bj = bv[(b * L + i) * S + j];
        s[j] = bj == kNegInf ? kNegInf : cap * std::tanh((d / std::sqrt(double(E)) + bj) / cap);
        mx = std::max(mx, s[j]);
      }
      if (mx == kNegInf) continue;
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t e = 0; e < Ev; ++e) out[(b * L + i) * Ev + e] += s[j] / sum * vv[(b * S + j) * Ev + e];
    }
  return out;
}

TEST(FlexAttention, SoftCapMatchesNaiveReference) {
  // Scores of up to ~6 so that the cap bends them.
  const Tensor q = testing::T(scaled(V(rand({2, 2, 10, 4}, 4)), 3), {2, 2, 10, 4}, kF64),
               k = testing::T(scaled(V(rand({2, 2, 10, 4}, 5)), 3), {2, 2, 10, 4}, kF64),
               v = rand({2, 2, 10, 3}, 6, kF64);
  FlexMask m;
  m.is_causal = true;
  const std::vector<std::vector<int64_t>> docs = {{0, 0, 0, 0, 1, 1, 1, 1, 1, 1}};
  m.document_ids = doc_tensor(docs);
  FlexScoreMod mod;
  mod.soft_cap = 0.8;
  mod.alibi_slopes = Tensor::from_vector(std::vector<double>{0.25, 1.0}, {2});
  const Tensor got = flex_attention(q, k, v, m, mod, std::nullopt, 3, std::nullopt, 0, 0);
  expect_near(V(got), naive(q, k, v, dense_bias(m, docs, {0.25, 1.0}, 2, 2, 10, 10), 0.8), 1e-12);
}

// A (q_offset, kv_offset) block equals the same rows and keys of the dense attention on global
// positions: the mask and ALiBi see global positions, as a sequence-sharded caller needs.
TEST(FlexAttention, OffsetsEvaluateTheMaskAtGlobalPositions) {
  const std::vector<std::vector<int64_t>> docs = {{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2}};
  FlexMask m;
  m.is_causal = true;
  m.window = 6;
  m.document_ids = doc_tensor(docs);
  const std::vector<double> slopes = {0.3, 0.7};
  FlexScoreMod mod;
  mod.alibi_slopes = Tensor::from_vector(slopes, {2});
  const int64_t qo = 8, ko = 3, L = 7, S = 12;
  const Tensor q = rand({1, 2, L, 4}, 7, kF64), k = rand({1, 2, S, 4}, 8, kF64), v = rand({1, 2, S, 4}, 9, kF64);
  const Tensor got = flex_attention(q, k, v, m, mod, std::nullopt, 4, std::nullopt, qo, ko);
  const Tensor want = scaled_dot_product_attention(q, k, v, dense_bias(m, docs, slopes, 1, 2, L, S, qo, ko), false);
  expect_near(V(got), V(want), 1e-12);
}

TEST(FlexAttention, BlockMaskClassifiesTiles) {
  FlexMask m;
  m.is_causal = true;
  // L = S = 8 in tiles of 4: the diagonal tiles are partial, the lower one full, the upper empty.
  EXPECT_EQ(create_block_mask(m, 8, 8, 4).to_vector<int32_t>(),
            (std::vector<int32_t>{kPartialTile, kEmptyTile, kFullTile, kPartialTile}));
  // Documents [0 0 0 0 1 1 1 1 1 1] in tiles of 4 without causality: each tile lies within one
  // document per side, so it is full (same document) or empty.
  m.is_causal = false;
  m.document_ids = Tensor::from_vector(std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1, 1, 1}, {10});
  EXPECT_EQ(create_block_mask(m, 10, 10, 4).to_vector<int32_t>(),
            (std::vector<int32_t>{kFullTile, kEmptyTile, kEmptyTile, kEmptyTile, kFullTile, kFullTile, kEmptyTile,
                                  kFullTile, kFullTile}));
  EXPECT_EQ(create_block_mask(m, 10, 10, 4).sizes(), (Shape{1, 3, 3}));
}

// The kernel trusts the block mask: a tile marked empty is skipped (its keys get no weight) and a
// tile marked full is not masked; so the results differ from the true ones exactly as predicted.
TEST(FlexAttention, EmptyTilesAreSkippedAndFullTilesUnmasked) {
  const Tensor q = rand({1, 1, 8, 4}, 10, kF64), k = rand({1, 1, 8, 4}, 11, kF64), v = rand({1, 1, 8, 4}, 12, kF64);
  FlexMask causal;
  causal.is_causal = true;
  const Tensor bm = create_block_mask(causal, 8, 8, 4);
  const Tensor right = flex_attention(q, k, v, causal, {}, bm, 4, std::nullopt, 0, 0);
  expect_near(V(right), V(flex_attention(q, k, v, causal, {}, std::nullopt, 4, std::nullopt, 0, 0)), 0);
  // Marking the lower-left (full) tile empty: rows 4..7 then attend only to keys 4..j.
  Tensor skip = bm.contiguous().clone();
  skip.data<int32_t>()[2] = kEmptyTile;
  std::vector<bool> allow(64);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j <= i; ++j) allow[i * 8 + j] = !(i >= 4 && j < 4);
  std::vector<double> bias;
  for (bool a : allow) bias.push_back(a ? 0 : kNegInf);
  expect_near(V(flex_attention(q, k, v, causal, {}, skip, 4, std::nullopt, 0, 0)),
              V(scaled_dot_product_attention(q, k, v, Tensor::from_vector(bias, {8, 8}), false)), 1e-12);
  // Marking the first diagonal tile full: rows 0..3 see keys 0..3 unmasked.
  Tensor full = bm.contiguous().clone();
  full.data<int32_t>()[0] = kFullTile;
  bias.clear();
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 8; ++j) bias.push_back(j <= i || (i < 4 && j < 4) ? 0 : kNegInf);
  expect_near(V(flex_attention(q, k, v, causal, {}, full, 4, std::nullopt, 0, 0)),
              V(scaled_dot_product_attention(q, k, v, Tensor::from_vector(bias, {8, 8}), false)), 1e-12);
}

TEST(FlexAttention, RowWithoutVisibleKeysIsZero) {
  FlexMask m;
  m.is_causal = true;
  const Tensor q = rand({1, 3, 4}, 13, kF64), k = rand({1, 5, 4}, 14, kF64), v = rand({1, 5, 2}, 15, kF64);
  // Keys start at global position 2: query rows 0 and 1 see none.
  const auto out = V(flex_attention(q, k, v, m, {}, std::nullopt, 2, std::nullopt, 0, 2));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 0.0) << i;
  EXPECT_NE(out[4], 0.0);
}

// Gradients of sum(out * w) against central differences, for a mask and score modifier that use
// every feature (document + causal + window + prefix, ALiBi, soft cap) and partial, full and empty
// tiles.
TEST(FlexAttention, BackwardMatchesFiniteDifferences) {
  const int64_t B = 2, H = 2, L = 9, S = 9, E = 3, Ev = 2;
  Tensor q = rand({B, H, L, E}, 16, kF64), k = rand({B, H, S, E}, 17, kF64), v = rand({B, H, S, Ev}, 18, kF64);
  const Tensor w = rand({B, H, L, Ev}, 19, kF64);
  FlexMask m;
  m.is_causal = true;
  m.window = 4;
  m.prefix_length = 2;
  m.document_ids = Tensor::from_vector(std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1},
                                       {2, 9});
  FlexScoreMod mod;
  mod.alibi_slopes = Tensor::from_vector(std::vector<double>{0.5, 0.25}, {2});
  mod.soft_cap = 1.5;
  const Tensor bm = create_block_mask(m, L, S, 3);
  auto loss = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
    const auto o = V(flex_attention(a, b, c, m, mod, bm, 3, 0.9, 0, 0));
    const auto ww = V(w);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * ww[i];
    return s;
  };
  const Tensor out = flex_attention(q, k, v, m, mod, bm, 3, 0.9, 0, 0);
  const AttentionGrads g = flex_attention_backward(w, q, k, v, out, m, mod, bm, 3, 0.9, 0, 0);
  const double h = 1e-6;
  for (int which = 0; which < 3; ++which) {
    Tensor* x = which == 0 ? &q : which == 1 ? &k : &v;
    const auto grad = V(which == 0 ? g.query : which == 1 ? g.key : g.value);
    for (int64_t i = 0; i < x->numel(); ++i) {
      double* d = x->data<double>() + i;
      const double keep = *d;
      *d = keep + h;
      const double up = loss(q, k, v);
      *d = keep - h;
      const double down = loss(q, k, v);
      *d = keep;
      EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-7) << "input " << which << " element " << i;
    }
  }
}

TEST(FlexAttention, BadArgumentsNameTheProblem) {
  const Tensor q = rand({2, 2, 6, 4}, 20), k = rand({2, 2, 6, 4}, 21), v = rand({2, 2, 6, 4}, 22);
  FlexMask m;
  m.document_ids = Tensor::from_vector(std::vector<double>{0, 0, 1, 1, 1, 1}, {6});
  expect_error([&] { flex_attention(q, k, v, m, {}, std::nullopt, 4, std::nullopt, 0, 0); },
               {"flex_attention", "document_ids float64 [6]", "int64"});
  m.document_ids = Tensor::from_vector(std::vector<int64_t>{0, 0, 1, 1, 1}, {5});
  expect_error([&] { flex_attention(q, k, v, m, {}, std::nullopt, 4, std::nullopt, 0, 0); },
               {"flex_attention", "cover 5 positions"});
  expect_error([&] { flex_attention(q, k, v, {}, {}, Tensor::zeros({1, 2, 1}, DType::kInt32), 4, std::nullopt, 0, 0); },
               {"flex_attention", "block_mask int32 [1, 2, 1]", "[1 or 1, 2, 2]"});
  FlexScoreMod mod;
  mod.alibi_slopes = Tensor::zeros({3});
  expect_error([&] { flex_attention(q, k, v, {}, mod, std::nullopt, 4, std::nullopt, 0, 0); },
               {"flex_attention", "alibi_slopes float32 [3]", "query.size(-3)"});
  FlexMask w;
  w.window = -2;
  expect_error([&] { flex_attention(q, k, v, w, {}, std::nullopt, 4, std::nullopt, 0, 0); }, {"window -2"});
  expect_error([&] { flex_attention(q, k, v, {}, {}, std::nullopt, 0, std::nullopt, 0, 0); }, {"block_size 0"});
}

}  // namespace
}  // namespace dtensor::kernels
