// Executes a redistribution plan on one rank's local block.
#include <algorithm>
#include <cstring>

#include "dtensor/redistribute.h"

namespace dtensor {
namespace {

// Element counts of each rank's piece when a block of shape `block` is split along p.dim over k ranks
// by shard placement p (even or weighted), with p.dim moved to the front (so pieces are consecutive
// in memory).
std::vector<int64_t> piece_counts(const Shape& block, const Placement& p, int64_t k) {
  const int d = p.dim;
  int64_t inner = 1;
  for (int t = 0; t < static_cast<int>(block.size()); ++t)
    if (t != d) inner *= block[t];
  std::vector<int64_t> counts(k);
  for (int64_t r = 0; r < k; ++r) counts[r] = shard_range(p, block[d], k, r).second * inner;
  return counts;
}

// Packs `pieces` (any strides) one after another into one flat contiguous tensor of `total` elements.
Tensor pack(const std::vector<Tensor>& pieces, int64_t total, const Tensor& like) {
  Tensor in = Tensor::empty({total}, like.dtype(), like.device());
  int64_t at = 0;
  for (const Tensor& p : pieces) {
    Tensor dst = Tensor::from_storage(in.storage(), at, p.sizes(), contiguous_strides(p.sizes()),
                                      like.dtype());
    dst.copy_(p);
    at += p.numel();
  }
  return in;
}

Shape front(const Shape& s, int d, int64_t len) {
  Shape out{len};
  for (int i = 0; i < static_cast<int>(s.size()); ++i)
    if (i != d) out.push_back(s[i]);
  return out;
}

// Identity element of op for R->P on the non-zero coordinates.
Tensor partial_identity(const Tensor& value, ReduceOp op) {
  if (op == ReduceOp::kSum) return Tensor::zeros(value.sizes(), value.dtype(), value.device());
  return value;  // avg, max, min: every rank holding the value gives back the value
}

}  // namespace

Tensor redistribute_local(const Tensor& local_in, const DTensorSpec& src, const RedistributePlan& plan,
                          Timeout timeout) {
  const DeviceMesh& mesh = *src.mesh;
  if (!mesh.contains_me() || plan.steps.empty()) return local_in.contiguous();
  const auto& coord = mesh.coordinate();
  Placements cur = src.placements;
  Tensor x = local_in;
  for (const RedistributeStep& s : plan.steps) {
    const int i = s.mesh_dim;
    ProcessGroup& g = mesh.group(i);
    const int64_t k = g.size();
    const int64_t me = coord[i];
    // The block the group of mesh dim i holds together, and this rank's share of it.
    Shape block = local_block(src.shape, cur, mesh.shape(), coord, i).first;
    switch (s.kind) {
      case CommKind::kLocal: {
        if (s.to.is_shard()) {
          auto [start, len] = shard_range(s.to, block[s.to.dim], k, me);
          x = x.narrow(s.to.dim, start, len);
        } else if (s.to.is_partial() && me != 0) {
          x = partial_identity(x, s.to.reduce);
        }
        break;
      }
      case CommKind::kAllGather: {
        const int d = s.from.dim;
        Tensor in = x.movedim(d, 0).contiguous();
        Tensor out = Tensor::empty(front(block, d, block[d]), x.dtype(), x.device());
        g.all_gather(in, out, piece_counts(block, s.from, k), timeout);
        x = out.movedim(0, d);
        break;
      }
      case CommKind::kAllReduce: {
        Tensor in = x.contiguous();
        Tensor buf = Tensor::empty(x.sizes(), x.dtype(), x.device());  // never write into the caller's storage
        g.all_reduce(in, buf, s.from.reduce, timeout);
        x = buf;
        break;
      }
      case CommKind::kReduceScatter: {
        const int d = s.to.dim;
        Tensor in = x.movedim(d, 0).contiguous();
        auto counts = piece_counts(block, s.to, k);
        Tensor out = Tensor::empty(front(block, d, shard_range(s.to, block[d], k, me).second), x.dtype(),
                                   x.device());
        g.reduce_scatter(in, out, counts, s.from.reduce, timeout);
        x = out.movedim(0, d);
        break;
      }
      case CommKind::kAllToAll: {
        const int d = s.from.dim, e = s.to.dim;
        std::vector<int64_t> send(k), recv(k);
        std::vector<Tensor> pieces;
        int64_t send_total = 0, recv_total = 0;
        Shape new_block = block;
        if (d == e) {
          // Same dim, other weights (S(d)[a] -> S(d)[b] or even <-> weighted): rank r gets the part of
          // our old range that falls in its new range; the parts received, in rank order, tile our
          // new range.
          auto [os, ol] = shard_range(s.from, block[d], k, me);
          auto [ns, nl] = shard_range(s.to, block[d], k, me);
          const int64_t rest = block[d] == 0 ? 0 : numel(block) / block[d];
          for (int64_t r = 0; r < k; ++r) {
            auto [rs, rl] = shard_range(s.to, block[d], k, r);
            const int64_t lo = std::max(os, rs), len = std::max<int64_t>(std::min(os + ol, rs + rl) - lo, 0);
            pieces.push_back(x.narrow(d, len == 0 ? 0 : lo - os, len).movedim(d, 0));
            send[r] = len * rest;
            auto [qs, ql] = shard_range(s.from, block[d], k, r);
            recv[r] = std::max<int64_t>(std::min(qs + ql, ns + nl) - std::max(qs, ns), 0) * rest;
            send_total += send[r];
            recv_total += recv[r];
          }
          new_block[d] = nl;
        } else {
          // Each rank holds its part of the block along d and ends with its part along e. The piece
          // for rank r is our part's share of r's part along e; with d moved to the front, the
          // pieces received from ranks 0..k-1 concatenate into the new block.
          const int64_t my_d = shard_range(s.from, block[d], k, me).second;
          const int64_t my_e = shard_range(s.to, block[e], k, me).second;
          int64_t rest = 1;
          for (int t = 0; t < static_cast<int>(block.size()); ++t)
            if (t != d && t != e) rest *= block[t];
          for (int64_t r = 0; r < k; ++r) {
            auto [es, el] = shard_range(s.to, block[e], k, r);
            pieces.push_back(x.narrow(e, es, el).movedim(d, 0));
            send[r] = my_d * el * rest;
            recv[r] = shard_range(s.from, block[d], k, r).second * my_e * rest;
            send_total += send[r];
            recv_total += recv[r];
          }
          new_block[e] = my_e;
          new_block[d] = block[d];
        }
        Tensor in = pack(pieces, send_total, x);
        Tensor out = Tensor::empty({recv_total}, x.dtype(), x.device());
        g.all_to_all(in, send, out, recv, timeout);
        // With d at the front, the received pieces stack along d (rank order) into the new block.
        x = out.view(front(new_block, d, new_block[d])).movedim(0, d);
        break;
      }
      case CommKind::kBroadcast:
      case CommKind::kSendRecv:
      case CommKind::kBarrier:
        DT_FAIL("redistribute: internal error: a plan step of kind ", comm_kind_name(s.kind));
    }
    cur[i] = s.to;
  }
  return x.contiguous();
}

}  // namespace dtensor
