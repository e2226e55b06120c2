// Ring attention (ops/attention/ring.h) on 2 and 4 thread ranks against the single-device SDPA
// kernel on the same data (forward and backward; the kernel's backward is itself checked by finite
// differences in tests/kernels/attention_test.cc and tests/autograd/gradcheck_test.cc), the
// log-sum-exp merge against attention over all keys, and the bytes each rank sends against the
// ring formula written out by hand.
#include "ops/attention/ring.h"

#include <chrono>
#include <cmath>
#include <numeric>
#include <tuple>

#include "dtensor/collectives/threads_backend.h"
#include "dtensor/dtensor_spec.h"
#include "kernels/cpu/attention_merge.h"
#include "kernels/cpu/kernels.h"
#include "tests/kernels/test_util.h"
#include "dispatch/explain.h"
#include "nlohmann/json.hpp"

namespace dtensor::ops {
namespace {

using kernels::testing::rand;
using namespace std::chrono_literals;

// Largest |a - b| of tensors of one shape (dtensor::max_abs_diff, after checking the shapes).
double diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return a.sizes() == b.sizes() ? max_abs_diff(a.to(DType::kFloat64), b.to(DType::kFloat64)) : INFINITY;
}

std::shared_ptr<ProcessGroup> world(Backend& b) {
  std::vector<int> all(b.world_size());
  std::iota(all.begin(), all.end(), 0);
  return b.new_group(all, "world", 5000ms);
}

// Rows of `t` (dim -2) that rank r of n holds.
Tensor chunk_rows(const Tensor& t, int64_t n, int64_t r) {
  auto [start, len] = chunk_range(t.size(-2), n, r);
  return t.narrow(t.dim() - 2, start, len).contiguous();
}

struct Case {
  int ranks;
  int64_t seq_len;
  bool causal;
  DType dtype;
};

void check_case(const Case& c) {
  SCOPED_TRACE(::testing::Message() << c.ranks << " ranks, seq_len " << c.seq_len << (c.causal ? ", causal " : ", ")
                                    << dtype_name(c.dtype));
  const int64_t B = 2, H = 3, E = 4, Ev = 5;
  const Tensor q = rand({B, H, c.seq_len, E}, 1, c.dtype), k = rand({B, H, c.seq_len, E}, 2, c.dtype),
               v = rand({B, H, c.seq_len, Ev}, 3, c.dtype), g = rand({B, H, c.seq_len, Ev}, 4, c.dtype);
  const Tensor out = kernels::scaled_dot_product_attention(q, k, v, std::nullopt, c.causal);
  const kernels::AttentionGrads grads =
      kernels::scaled_dot_product_attention_backward(g, q, k, v, out, c.causal);
  const double tol = c.dtype == DType::kFloat64 ? 1e-12 : 2e-6;
  run_threads(c.ranks, [&](std::shared_ptr<Backend> b) {
    auto pg = world(*b);
    const int r = pg->rank();
    const Tensor ql = chunk_rows(q, c.ranks, r), kl = chunk_rows(k, c.ranks, r), vl = chunk_rows(v, c.ranks, r);
    const int64_t before = pg->stats().bytes_sent;
    RingAttentionOut fwd = ring_attention_forward(*pg, ql, kl, vl, c.seq_len, c.causal);
    const int64_t fwd_bytes = pg->stats().bytes_sent - before;
    EXPECT_EQ(fwd.out.dtype(), c.dtype);
    EXPECT_LE(diff(fwd.out, chunk_rows(out, c.ranks, r)), tol);
    kernels::AttentionGrads gl = ring_attention_backward(*pg, chunk_rows(g, c.ranks, r), ql, kl, vl, fwd.out,
                                                         fwd.lse, c.seq_len, c.causal);
    const int64_t bwd_bytes = pg->stats().bytes_sent - before - fwd_bytes;
    EXPECT_LE(diff(gl.query, chunk_rows(grads.query, c.ranks, r)), tol * 4);
    EXPECT_LE(diff(gl.key, chunk_rows(grads.key, c.ranks, r)), tol * 4);
    EXPECT_LE(diff(gl.value, chunk_rows(grads.value, c.ranks, r)), tol * 4);
    const int64_t elem = static_cast<int64_t>(itemsize(c.dtype));
    EXPECT_EQ(fwd_bytes, ring_attention_bytes_sent(B * H, c.seq_len, E, Ev, elem, c.ranks, r, false));
    EXPECT_EQ(bwd_bytes, ring_attention_bytes_sent(B * H, c.seq_len, E, Ev, elem, c.ranks, r, true));
    if (c.seq_len % c.ranks == 0) {
      // Even chunks: the forward sends (n-1)/n of the global key and value, by hand.
      const int64_t kv = B * H * c.seq_len * (E + Ev) * elem;
      EXPECT_EQ(fwd_bytes, kv * (c.ranks - 1) / c.ranks);
    }
  });
}

TEST(RingAttention, MatchesSingleDeviceForwardAndBackward) {
  for (int ranks : {2, 4})
    for (int64_t seq_len : {8, 7, 3})  // even, uneven, a rank with an empty chunk
      for (bool causal : {false, true})
        for (DType dt : {DType::kFloat64, DType::kFloat32}) check_case({ranks, seq_len, causal, dt});
}

// Two key halves merged by log-sum-exp give attention over all keys; lse is logsumexp of the scores.
TEST(RingAttention, MergeOfKeyBlocksEqualsAttentionOverAllKeys) {
  const Tensor q = rand({2, 6, 4}, 11, DType::kFloat64), k = rand({2, 10, 4}, 12, DType::kFloat64),
               v = rand({2, 10, 3}, 13, DType::kFloat64);
  for (bool causal : {false, true}) {
    // Queries at global positions 4..9, keys split at 5; the causal mask uses global positions.
    const int64_t q0 = 4;
    kernels::AttentionWithLse a =
        kernels::scaled_dot_product_attention_with_lse(q, k.narrow(1, 0, 5), v.narrow(1, 0, 5), causal, std::nullopt, q0);
    kernels::AttentionWithLse b = kernels::scaled_dot_product_attention_with_lse(
        q, k.narrow(1, 5, 5), v.narrow(1, 5, 5), causal, std::nullopt, q0 - 5);
    std::tie(a.out, a.lse) = kernels::merge_attention(a.out, a.lse, b.out, b.lse);
    kernels::AttentionWithLse full = kernels::scaled_dot_product_attention_with_lse(q, k, v, causal, std::nullopt, q0);
    EXPECT_LE(diff(a.out, full.out), 1e-12);
    EXPECT_LE(diff(a.lse, full.lse), 1e-12);
    EXPECT_LE(diff(full.out, kernels::scaled_dot_product_attention(q, k, v, std::nullopt, causal, std::nullopt, q0)),
              1e-12);
    if (!causal) {
      Tensor scores = kernels::mul(kernels::matmul(q, k.transpose(1, 2)), kernels::Scalar(0.5));  // 1/sqrt(4)
      EXPECT_LE(diff(full.lse, kernels::logsumexp(scores, {2})), 1e-12);
    }
  }
}

// Head-tail layout: rank r holds chunks r and 2n-1-r of 2n; its output rows are those rows of the
// single-device causal attention, and it sends the same bytes as the plain ring over blocks of its
// layout (for even chunks, (n-1)/n of the global key and value).
TEST(RingAttention, BalancedLayoutMatchesSingleDeviceCausal) {
  for (int ranks : {2, 4})
    for (int64_t seq_len : {16, 13, 5}) {  // even, uneven, chunks of 0 rows
      SCOPED_TRACE(::testing::Message() << ranks << " ranks, seq_len " << seq_len);
      const int64_t B = 2, H = 3, E = 4, Ev = 5;
      const Tensor q = rand({B, H, seq_len, E}, 21, DType::kFloat64), k = rand({B, H, seq_len, E}, 22, DType::kFloat64),
                   v = rand({B, H, seq_len, Ev}, 23, DType::kFloat64);
      const Tensor out = kernels::scaled_dot_product_attention(q, k, v, std::nullopt, true);
      run_threads(ranks, [&](std::shared_ptr<Backend> b) {
        auto pg = world(*b);
        const int r = pg->rank();
        auto [head, tail] = ring_attention_balanced_rows(seq_len, ranks, r);
        auto mine = [&](const Tensor& t) {
          return cat({t.narrow(2, head.first, head.second), t.narrow(2, tail.first, tail.second)}, 2).contiguous();
        };
        const int64_t before = pg->stats().bytes_sent;
        RingAttentionOut f = ring_attention_forward_balanced(*pg, mine(q), mine(k), mine(v), seq_len);
        EXPECT_LE(diff(f.out, mine(out)), 1e-12);
        if (seq_len % (2 * ranks) == 0) {
          EXPECT_EQ(pg->stats().bytes_sent - before, B * H * seq_len * (E + Ev) * 8 * (ranks - 1) / ranks);
        }
      });
    }
}

TEST(RingAttention, RejectsBlocksThatAreNotThisRanksChunk) {
  run_threads(2, [](std::shared_ptr<Backend> b) {
    auto pg = world(*b);
    const Tensor t = rand({1, 3, 4}, 5);  // 3 rows, but chunk 0 of 8 over 2 ranks has 4
    kernels::testing::expect_error([&] { ring_attention_forward(*pg, t, t, t, 8); },
                                   {"ring_attention_forward", "[1, 3, 4]", "chunk of seq_len 8"});
  });
}

// `dtensor explain`: sequence-sharded query, key and value run the ring (its bytes per rank are the
// ring formula: (n-1)/n of the global key and value), while a replicated key and value, already
// whole on every rank, keep the plain kernel on the query rows without any traffic.
TEST(RingAttention, ExplainChoosesRingForSequenceShardedInputs) {
  using json = nlohmann::json;
  const std::string t = R"j({"shape": [2, 4, 64, 16], "placements": [")j";
  auto ask = [&](const std::string& kv) {
    return json::parse(explain_line(R"j({"mesh": [4], "op": "scaled_dot_product_attention", "args": [)j" + t +
                                           R"j(S(2)"]}, )j" + t + kv + R"j("]}, )j" + t + kv +
                                           R"j("]}], "kwargs": {"is_causal": true}, "run": true})j"));
  };
  json ring = ask("S(2)");
  ASSERT_FALSE(ring.contains("error")) << ring.dump();
  EXPECT_EQ(ring["step"], "ring_attention") << ring.dump();
  ASSERT_EQ(ring["collectives"].size(), 1u) << ring.dump();
  EXPECT_EQ(ring["collectives"][0]["kind"], "send_recv");
  const int64_t kv_bytes = 2 * 4 * 64 * (16 + 16) * 4;  // global key + value, float32
  EXPECT_EQ(ring["collectives"][0]["bytes"].get<int64_t>(), kv_bytes * 3 / 4);
  EXPECT_TRUE(ring["run"]["match"].get<bool>()) << ring.dump();
  json local = ask("R");
  ASSERT_FALSE(local.contains("error")) << local.dump();
  EXPECT_FALSE(local.contains("step")) << local.dump();
  EXPECT_TRUE(local["collectives"].empty()) << local.dump();
  EXPECT_EQ(local["inputs"][1]["to"], json::parse(R"j(["R"])j"));
}

}  // namespace
}  // namespace dtensor::ops
