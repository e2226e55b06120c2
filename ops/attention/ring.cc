#include "ops/attention/ring.h"

#include <cmath>
#include <future>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "dtensor/dtensor_spec.h"
#include "kernels/cpu/attention_merge.h"
#include "kernels/cpu/kernels.h"

namespace dtensor::ops {
namespace {

Shape with_seq(const Tensor& t, int64_t len) {
  Shape s = t.sizes();
  s[s.size() - 2] = len;
  return s;
}

// Checks the local blocks against this rank's chunk of seq_len.
void check_blocks(const char* op, const ProcessGroup& pg, const Tensor& q, const Tensor& k,
                  const Tensor& v, int64_t seq_len) {
  const int64_t len = chunk_range(seq_len, pg.size(), pg.rank()).second;
  DT_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim() && q.size(-2) == len &&
               k.size(-2) == len && v.size(-2) == len && k.size(-1) == q.size(-1) &&
               with_seq(k, 0) == with_seq(q, 0) &&
               Shape(v.sizes().begin(), v.sizes().end() - 1) == Shape(k.sizes().begin(), k.sizes().end() - 1) &&
               is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
           op, " on ", pg.describe(), " rank ", pg.rank(), ": query ", dtype_name(q.dtype()), " ",
           shape_str(q.sizes()), ", key ", dtype_name(k.dtype()), " ", shape_str(k.sizes()), ", value ",
           dtype_name(v.dtype()), " ", shape_str(v.sizes()), " (accepted: query [..., Lr, E], key [..., Lr, E], ",
           "value [..., Lr, Ev] of one floating dtype, Lr = ", len, " this rank's chunk of seq_len ", seq_len, ")");
}

// Sends `send` to the next rank and receives the previous rank's blocks into `recv` (buffers
// already sized); zero-sized blocks are not sent (both sides know the chunk sizes).
void ring_exchange(ProcessGroup& pg, const std::vector<Tensor>& send, std::vector<Tensor>& recv,
                   Timeout timeout) {
  const int n = pg.size(), r = pg.rank();
  std::vector<P2POp> ops;
  for (size_t i = 0; i < send.size(); ++i)
    if (send[i].numel() > 0) ops.push_back({P2POp::kSend, send[i], (r + 1) % n, static_cast<int>(i)});
  for (size_t i = 0; i < recv.size(); ++i)
    if (recv[i].numel() > 0) ops.push_back({P2POp::kRecv, recv[i], (r + n - 1) % n, static_cast<int>(i)});
  if (!ops.empty()) pg.batch_isend_irecv(ops, timeout);
}

// Starts the exchange on a helper thread, so the caller computes meanwhile; get() rethrows its
// failure. Only this thread uses `pg` until then. Device blocks are exchanged before the caller goes
// on (a deferred future): a helper thread would enqueue on its own current stream, unordered with
// the caller's kernels that produced the blocks.
std::future<void> start_exchange(ProcessGroup& pg, std::vector<Tensor> send, std::vector<Tensor>& recv,
                                 Timeout timeout) {
  const bool on_device = !send.empty() && !send[0].device().is_cpu();
  if (on_device) {
    ring_exchange(pg, send, recv, timeout);
    return std::async(std::launch::deferred, [] {});
  }
  return std::async(std::launch::async, [&pg, send = std::move(send), &recv, timeout] {
    ring_exchange(pg, send, recv, timeout);
  });
}

struct Step {
  int src;          // the rank whose key/value block is held
  int64_t k0, len;  // its global offset and length
};

Step step_of(int64_t seq_len, int n, int rank, int s) {
  const int src = (rank - s % n + n) % n;
  auto [k0, len] = chunk_range(seq_len, n, src);
  return Step{src, k0, len};
}

// Whether query rows [q0, q0 + lq) see any key of [k0, k0 + lk).
bool block_visible(bool is_causal, int64_t q0, int64_t lq, int64_t k0, int64_t lk) {
  return lq > 0 && lk > 0 && (!is_causal || k0 <= q0 + lq - 1);
}

}  // namespace

RingAttentionOut ring_attention_forward(ProcessGroup& pg, const Tensor& query, const Tensor& key,
                                        const Tensor& value, int64_t seq_len, bool is_causal,
                                        std::optional<double> scale, Timeout timeout) {
  const char* op = "ring_attention_forward";
  check_blocks(op, pg, query, key, value, seq_len);
  const int n = pg.size(), r = pg.rank();
  const int64_t q0 = chunk_range(seq_len, n, r).first, lq = query.size(-2);
  if (!scale.has_value()) scale = 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  const DType compute = query.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  const Device dev = query.device();  // every buffer where the blocks are (StepDef::runs_on_device)
  Tensor out = Tensor::zeros(with_seq(value, lq), compute, dev);
  Shape ls = query.sizes();
  ls.pop_back();
  Tensor lse = Tensor::full(ls, -std::numeric_limits<double>::infinity(), compute, dev);
  Tensor k = key.contiguous(), v = value.contiguous();
  for (int s = 0; s < n; ++s) {
    const Step st = step_of(seq_len, n, r, s);
    std::vector<Tensor> next;
    std::future<void> pending;  // after `next`: on unwinding it waits for the exchange writing into next
    if (s + 1 < n) {
      const int64_t nlen = step_of(seq_len, n, r, s + 1).len;
      next = {Tensor::empty(with_seq(key, nlen), key.dtype(), key.device()),
              Tensor::empty(with_seq(value, nlen), value.dtype(), value.device())};
      pending = start_exchange(pg, {k, v}, next, timeout);
    }
    if (block_visible(is_causal, q0, lq, st.k0, st.len)) {
      kernels::AttentionWithLse b =
          kernels::scaled_dot_product_attention_with_lse(query, k, v, is_causal, scale, q0 - st.k0);
      std::tie(out, lse) = kernels::merge_attention(out, lse, b.out, b.lse);
    }
    if (pending.valid()) {
      pending.get();
      k = next[0];
      v = next[1];
    }
  }
  return RingAttentionOut{out.to(query.dtype()), lse};
}

std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> ring_attention_balanced_rows(int64_t seq_len, int n,
                                                                                                 int rank) {
  return {chunk_range(seq_len, 2 * n, rank), chunk_range(seq_len, 2 * n, 2 * n - 1 - rank)};
}

RingAttentionOut ring_attention_forward_balanced(ProcessGroup& pg, const Tensor& query, const Tensor& key,
                                                 const Tensor& value, int64_t seq_len,
                                                 std::optional<double> scale, Timeout timeout) {
  const char* op = "ring_attention_forward_balanced";
  const int n = pg.size(), r = pg.rank();
  auto rows = [&](int rank) {
    auto [a, b] = ring_attention_balanced_rows(seq_len, n, rank);
    return std::vector<std::pair<int64_t, int64_t>>{a, b};
  };
  const auto mine = rows(r);
  const int64_t lr = mine[0].second + mine[1].second;
  DT_CHECK(query.dim() >= 2 && key.dim() == query.dim() && value.dim() == query.dim() && query.size(-2) == lr &&
               key.size(-2) == lr && value.size(-2) == lr && key.size(-1) == query.size(-1) &&
               is_floating(query.dtype()) && key.dtype() == query.dtype() && value.dtype() == query.dtype(),
           op, " on ", pg.describe(), " rank ", r, ": query ", shape_str(query.sizes()), ", key ",
           shape_str(key.sizes()), ", value ", shape_str(value.sizes()), " (accepted: [..., Lr, E] of one floating ",
           "dtype, Lr = ", lr, " the rows of chunks ", r, " and ", 2 * n - 1 - r, " of seq_len ", seq_len, " in ", 2 * n,
           ")");
  if (!scale.has_value()) scale = 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  const DType compute = query.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  // Per query chunk: its rows, merged output and log-sum-exp.
  std::vector<Tensor> q(2), out(2), lse(2);
  for (int a = 0; a < 2; ++a) {
    const int64_t off = a == 0 ? 0 : mine[0].second;
    q[a] = query.narrow(query.dim() - 2, off, mine[a].second).contiguous();
    out[a] = Tensor::zeros(with_seq(value, mine[a].second), compute, query.device());
    Shape ls = q[a].sizes();
    ls.pop_back();
    lse[a] = Tensor::full(ls, -std::numeric_limits<double>::infinity(), compute, query.device());
  }
  Tensor k = key.contiguous(), v = value.contiguous();
  for (int s = 0; s < n; ++s) {
    const int src = (r - s % n + n) % n;
    const auto held = rows(src);
    std::vector<Tensor> next;
    std::future<void> pending;  // after `next`: on unwinding it waits for the exchange writing into next
    if (s + 1 < n) {
      const auto nr = rows((r - (s + 1) % n + n) % n);
      const int64_t nlen = nr[0].second + nr[1].second;
      next = {Tensor::empty(with_seq(key, nlen), key.dtype(), key.device()),
              Tensor::empty(with_seq(value, nlen), value.dtype(), value.device())};
      pending = start_exchange(pg, {k, v}, next, timeout);
    }
    for (int b = 0; b < 2; ++b) {
      const int64_t koff = b == 0 ? 0 : held[0].second;
      const Tensor kb = k.narrow(k.dim() - 2, koff, held[b].second).contiguous();
      const Tensor vb = v.narrow(v.dim() - 2, koff, held[b].second).contiguous();
      for (int a = 0; a < 2; ++a) {
        if (!block_visible(true, mine[a].first, mine[a].second, held[b].first, held[b].second)) continue;
        kernels::AttentionWithLse blk = kernels::scaled_dot_product_attention_with_lse(
            q[a], kb, vb, true, scale, mine[a].first - held[b].first);
        std::tie(out[a], lse[a]) = kernels::merge_attention(out[a], lse[a], blk.out, blk.lse);
      }
    }
    if (pending.valid()) {
      pending.get();
      k = next[0];
      v = next[1];
    }
  }
  return RingAttentionOut{cat({out[0], out[1]}, out[0].dim() - 2).to(query.dtype()), cat({lse[0], lse[1]}, lse[0].dim() - 1)};
}

kernels::AttentionGrads ring_attention_backward(ProcessGroup& pg, const Tensor& grad_out,
                                                const Tensor& query, const Tensor& key,
                                                const Tensor& value, const Tensor& out,
                                                const Tensor& lse, int64_t seq_len, bool is_causal,
                                                std::optional<double> scale, Timeout timeout) {
  const char* op = "ring_attention_backward";
  check_blocks(op, pg, query, key, value, seq_len);
  const int n = pg.size(), r = pg.rank();
  const int64_t q0 = chunk_range(seq_len, n, r).first, lq = query.size(-2);
  const DType compute = query.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  const Shape o_shape = with_seq(value, lq);
  Shape l_shape = query.sizes();
  l_shape.pop_back();
  DT_CHECK(grad_out.sizes() == o_shape && out.sizes() == o_shape && lse.sizes() == l_shape &&
               lse.dtype() == compute,
           op, " on ", pg.describe(), ": grad_out ", shape_str(grad_out.sizes()), ", out ", shape_str(out.sizes()),
           ", lse ", dtype_name(lse.dtype()), " ", shape_str(lse.sizes()), " (accepted: grad_out and out ",
           shape_str(o_shape), ", lse ", dtype_name(compute), " ", shape_str(l_shape),
           " from ring_attention_forward)");
  if (!scale.has_value()) scale = 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  const Tensor g = grad_out.to(compute).contiguous(), o = out.to(compute).contiguous(),
               l = lse.contiguous();
  const Device dev = query.device();  // every buffer where the blocks are (StepDef::runs_on_device)
  Tensor dq = Tensor::zeros(query.sizes(), compute, dev);
  // The held block and its gradient accumulators travel together.
  std::vector<Tensor> held = {key.contiguous(), value.contiguous(), Tensor::zeros(key.sizes(), compute, dev),
                              Tensor::zeros(value.sizes(), compute, dev)};
  for (int s = 0; s < n; ++s) {
    const Step st = step_of(seq_len, n, r, s);
    if (block_visible(is_causal, q0, lq, st.k0, st.len)) {
      // This block's probabilities are its local softmax times w = exp(lse_b - lse) per row.
      kernels::AttentionWithLse b =
          kernels::scaled_dot_product_attention_with_lse(query, held[0], held[1], is_causal, scale, q0 - st.k0);
      Tensor w = kernels::attention_block_weight(b.lse, l).unsqueeze(-1);
      kernels::AttentionGrads gb = kernels::scaled_dot_product_attention_backward(
          kernels::mul(g, w), query.to(compute), held[0].to(compute), held[1].to(compute), o, is_causal,
          scale, std::nullopt, q0 - st.k0);
      dq = kernels::add(dq, gb.query);
      held[2] = kernels::add(held[2], gb.key).contiguous();
      held[3] = kernels::add(held[3], gb.value).contiguous();
    }
    // Pass the block with its gradients on; after the last step only the gradients travel, to
    // their owner (rank r + 1, whose block is held now).
    const int64_t nlen = step_of(seq_len, n, r, s + 1).len;
    if (n == 1) break;
    std::vector<Tensor> send = s + 1 < n ? held : std::vector<Tensor>{held[2], held[3]};
    std::vector<Tensor> recv = {Tensor::empty(with_seq(key, nlen), compute, dev),
                                Tensor::empty(with_seq(value, nlen), compute, dev)};
    if (s + 1 < n)
      recv.insert(recv.begin(), {Tensor::empty(with_seq(key, nlen), key.dtype(), dev),
                                 Tensor::empty(with_seq(value, nlen), value.dtype(), dev)});
    ring_exchange(pg, send, recv, timeout);
    held = s + 1 < n ? recv : std::vector<Tensor>{key, value, recv[0], recv[1]};
  }
  return kernels::AttentionGrads{dq.to(query.dtype()), held[2].to(key.dtype()), held[3].to(value.dtype())};
}

int64_t ring_attention_bytes_sent(int64_t batch, int64_t seq_len, int64_t E, int64_t Ev, int64_t elem,
                                  int n, int rank, bool backward) {
  const int64_t grad_elem = elem == 8 ? 8 : 4;  // gradients accumulate in the compute dtype
  int64_t bytes = 0;
  for (int s = 0; s + 1 < n; ++s) {
    const int64_t len = step_of(seq_len, n, rank, s).len;
    bytes += batch * len * (E + Ev) * (elem + (backward ? grad_elem : 0));
  }
  if (backward && n > 1) bytes += batch * step_of(seq_len, n, rank, n - 1).len * (E + Ev) * grad_elem;
  return bytes;
}

}  // namespace dtensor::ops
