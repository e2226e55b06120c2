#include "kernels/cpu/flex_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/attention_shapes.h"
#include "kernels/cpu/blas_gemm.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

using detail::attention_shapes_str;
using detail::gemm;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The mask in plain numbers: document ids on the host, one row of N per index of dim 0.
struct MaskEval {
  bool causal = false;
  int64_t window = -1, prefix = 0;
  Tensor doc;  // int64 [rows, N], contiguous host; undefined without documents
  int64_t doc_rows = 1, doc_n = 0;

  const int64_t* doc_row(int64_t r) const {
    return doc.defined() ? doc.data<int64_t>() + (doc_rows == 1 ? 0 : r) * doc_n : nullptr;
  }
  // The mask of flex_attention.h at global positions qp, kp; doc: document_ids row or nullptr.
  bool visible(const int64_t* doc, int64_t qp, int64_t kp) const {
    if (doc && doc[qp] != doc[kp]) return false;
    if (kp < prefix) return true;
    if (causal && kp > qp) return false;
    return window < 0 || std::abs(qp - kp) <= window;
  }
};

MaskEval mask_eval(const char* op, const FlexMask& m, int64_t L, int64_t S, int64_t q_offset, int64_t kv_offset) {
  DT_CHECK(m.window >= -1, op, ": window ", m.window, " (accepted: -1 for none, or >= 0)");
  DT_CHECK(m.prefix_length >= 0, op, ": prefix_length ", m.prefix_length, " (accepted: >= 0)");
  DT_CHECK(q_offset >= 0 && kv_offset >= 0, op, ": q_offset ", q_offset, " and kv_offset ", kv_offset,
           " (accepted: >= 0)");
  MaskEval e;
  e.causal = m.is_causal;
  e.window = m.window;
  e.prefix = m.prefix_length;
  if (m.document_ids) {
    const Tensor& d = *m.document_ids;
    DT_CHECK(d.dtype() == DType::kInt64 && (d.dim() == 1 || d.dim() == 2), op, ": document_ids ",
             dtype_name(d.dtype()), " ", shape_str(d.sizes()), " (accepted: int64 [N] or [B0, N])");
    e.doc_n = d.size(-1);
    e.doc_rows = d.dim() == 2 ? d.size(0) : 1;
    DT_CHECK(q_offset + L <= e.doc_n && kv_offset + S <= e.doc_n, op, ": document_ids ", shape_str(d.sizes()),
             " cover ", e.doc_n, " positions but queries reach ", q_offset + L, " and keys ", kv_offset + S);
    e.doc = d.to(cpu()).contiguous();
  }
  return e;
}

struct Problem : detail::AttentionShapes {
  int64_t heads = 1;   // size of dim -3 (the head index of ALiBi); 1 for rank 2
  int64_t per_b0 = 1;  // flattened batch entries per index of dim 0
  int64_t bs = 1, nq = 0, nk = 0;
  double scale = 1, soft_cap = 0;
  std::vector<double> slopes;  // per head; empty without ALiBi
  int64_t q_offset = 0, kv_offset = 0;
  MaskEval mask;
  Tensor tiles;  // int32 [tile_rows, nq, nk]
  int64_t tile_rows = 1;
};

Tensor build_block_mask(const MaskEval& e, int64_t L, int64_t S, int64_t bs, int64_t q_offset, int64_t kv_offset) {
  const int64_t nq = ceil_div(L, bs), nk = ceil_div(S, bs);
  Tensor t = Tensor::zeros({e.doc_rows, nq, nk}, DType::kInt32);
  int32_t* out = t.data<int32_t>();
  for (int64_t r = 0; r < e.doc_rows; ++r) {
    const int64_t* doc = e.doc_row(r);
    for (int64_t ti = 0; ti < nq; ++ti)
      for (int64_t tj = 0; tj < nk; ++tj) {
        const int64_t i1 = std::min(L, (ti + 1) * bs), j1 = std::min(S, (tj + 1) * bs);
        int64_t seen = 0;
        for (int64_t i = ti * bs; i < i1; ++i)
          for (int64_t j = tj * bs; j < j1; ++j) seen += e.visible(doc, q_offset + i, kv_offset + j);
        const int64_t all = (i1 - ti * bs) * (j1 - tj * bs);
        out[(r * nq + ti) * nk + tj] = seen == 0 ? kEmptyTile : seen == all ? kFullTile : kPartialTile;
      }
  }
  return t;
}

Problem check(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const FlexMask& mask,
              const FlexScoreMod& mod, const std::optional<Tensor>& block_mask, int64_t block_size,
              std::optional<double> scale, int64_t q_offset, int64_t kv_offset) {
  Problem p{detail::check_attention_shapes(op, q, k, v)};
  DT_CHECK(block_size >= 1, op, ": block_size ", block_size, " (accepted: >= 1)");
  DT_CHECK(mod.soft_cap >= 0 && std::isfinite(mod.soft_cap), op, ": soft_cap ", mod.soft_cap,
           " (accepted: 0 for none, or > 0)");
  p.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(p.E));
  p.soft_cap = mod.soft_cap;
  p.heads = q.dim() >= 3 ? q.size(-3) : 1;
  p.per_b0 = q.dim() >= 3 && q.size(0) > 0 ? p.B / q.size(0) : 1;
  p.q_offset = q_offset;
  p.kv_offset = kv_offset;
  p.bs = block_size;
  p.nq = ceil_div(p.L, p.bs);
  p.nk = ceil_div(p.S, p.bs);
  if (mod.alibi_slopes) {
    const Tensor& a = *mod.alibi_slopes;
    DT_CHECK(q.dim() >= 3 && is_floating(a.dtype()) && a.dim() == 1 && a.size(0) == p.heads, op,
             ": alibi_slopes ", dtype_name(a.dtype()), " ", shape_str(a.sizes()), " for ", attention_shapes_str(q, k, v),
             " (accepted: floating [H], H = query.size(-3), query of rank >= 3)");
    p.slopes = a.to(cpu()).to_vector<double>();
  }
  p.mask = mask_eval(op, mask, p.L, p.S, q_offset, kv_offset);
  if (mask.document_ids && mask.document_ids->dim() == 2)
    DT_CHECK(q.dim() >= 3 && mask.document_ids->size(0) == q.size(0), op, ": document_ids ",
             shape_str(mask.document_ids->sizes()), " for ", attention_shapes_str(q, k, v),
             " (accepted: [N], or [query.size(0), N] for a query of rank >= 3)");
  if (block_mask) {
    const Tensor& t = *block_mask;
    const bool ok = t.dtype() == DType::kInt32 && t.dim() == 3 && (t.size(0) == 1 || t.size(0) == p.mask.doc_rows) &&
                    t.size(1) == p.nq && t.size(2) == p.nk;
    DT_CHECK(ok, op, ": block_mask ", dtype_name(t.dtype()), " ", shape_str(t.sizes()), " (accepted: int32 [1 or ",
             p.mask.doc_rows, ", ", p.nq, ", ", p.nk, "] for L ", p.L, ", S ", p.S, ", block_size ", p.bs, ")");
    p.tiles = t.to(cpu()).contiguous();
  } else {
    p.tiles = build_block_mask(p.mask, p.L, p.S, p.bs, q_offset, kv_offset);
  }
  p.tile_rows = p.tiles.size(0);
  return p;
}

// Scores and probabilities of the query tile ti of batch entry b: Z (the modified scores, -inf
// where masked) and P, both [r, S] with row stride S, filled on the columns of `cols` (the
// non-empty key tiles) only.
template <typename T>
struct TileRows {
  const Problem& p;
  const T* q;
  const T* k;
  std::vector<int64_t> cols;  // non-empty key tiles of the current query tile
  std::vector<T> Z, P;

  TileRows(const Problem& pr, const T* qd, const T* kd)
      : p(pr), q(qd), k(kd), Z(static_cast<size_t>(pr.bs * std::max<int64_t>(pr.S, 1))), P(Z.size()) {}

  // Returns the number of rows r of the tile.
  int64_t fill(int64_t b, int64_t ti) {
    const int64_t b0 = b / p.per_b0, i0 = ti * p.bs, r = std::min(p.bs, p.L - i0);
    const int32_t* tiles = p.tiles.data<int32_t>() + ((p.tile_rows == 1 ? 0 : b0) * p.nq + ti) * p.nk;
    cols.clear();
    for (int64_t tj = 0; tj < p.nk; ++tj)
      if (tiles[tj] != kEmptyTile) cols.push_back(tj);
    if (cols.empty()) return r;
    const int64_t* doc = p.mask.doc_row(b0);
    const T slope = p.slopes.empty() ? T(0) : static_cast<T>(p.slopes[b % p.heads]);
    const T cap = static_cast<T>(p.soft_cap);
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    for (int64_t tj : cols) {
      const int64_t j0 = tj * p.bs, c = std::min(p.bs, p.S - j0);
      gemm(false, true, r, c, p.E, static_cast<T>(p.scale), q + (b * p.L + i0) * p.E, p.E, k + (b * p.S + j0) * p.E,
           p.E, T(0), Z.data() + j0, p.S);
      const bool partial = tiles[tj] == kPartialTile;  // full tiles skip the mask
      for (int64_t rr = 0; rr < r; ++rr) {
        T* z = Z.data() + rr * p.S + j0;
        const int64_t qp = p.q_offset + i0 + rr;
        for (int64_t jj = 0; jj < c; ++jj) {
          const int64_t kp = p.kv_offset + j0 + jj;
          if (partial && !p.mask.visible(doc, qp, kp)) {
            z[jj] = kNegInf;
            continue;
          }
          T s = z[jj];
          if (slope != T(0)) s += slope * static_cast<T>(kp - qp);
          if (cap > T(0)) s = cap * std::tanh(s / cap);
          z[jj] = s;
        }
      }
    }
    for (int64_t rr = 0; rr < r; ++rr) {
      const T* z = Z.data() + rr * p.S;
      T* pr = P.data() + rr * p.S;
      T mx = kNegInf;
      for (int64_t tj : cols)
        for (int64_t j = tj * p.bs, j1 = std::min(p.S, j + p.bs); j < j1; ++j) mx = std::max(mx, z[j]);
      T sum = 0;
      for (int64_t tj : cols) {
        const int64_t j0 = tj * p.bs, c = std::min(p.bs, p.S - j0);
        if (mx == kNegInf) {  // no visible key: a zero row
          std::fill(pr + j0, pr + j0 + c, T(0));
          continue;
        }
        std::copy(z + j0, z + j0 + c, pr + j0);
        if constexpr (std::is_same_v<T, float>) {
          sum += vec::exp_shifted_sum(pr + j0, c, mx);
        } else {
          for (int64_t j = j0; j < j0 + c; ++j) sum += (pr[j] = std::exp(pr[j] - mx));
        }
      }
      if (mx == kNegInf) continue;
      const T inv = T(1) / sum;
      for (int64_t tj : cols)
        for (int64_t j = tj * p.bs, j1 = std::min(p.S, j + p.bs); j < j1; ++j) pr[j] *= inv;
    }
    return r;
  }
};

Shape with_tail(const Shape& batch, int64_t a, int64_t b) {
  Shape s = batch;
  s.push_back(a);
  s.push_back(b);
  return s;
}

}  // namespace

Tensor create_block_mask(const FlexMask& mask, int64_t L, int64_t S, int64_t block_size, int64_t q_offset,
                         int64_t kv_offset) {
  DT_CHECK(L >= 0 && S >= 0 && block_size >= 1, "create_block_mask: L ", L, ", S ", S, ", block_size ", block_size,
           " (accepted: L, S >= 0, block_size >= 1)");
  return build_block_mask(mask_eval("create_block_mask", mask, L, S, q_offset, kv_offset), L, S, block_size, q_offset,
                          kv_offset);
}

Tensor flex_attention(const Tensor& query, const Tensor& key, const Tensor& value, const FlexMask& mask,
                      const FlexScoreMod& score_mod, const std::optional<Tensor>& block_mask, int64_t block_size,
                      std::optional<double> scale, int64_t q_offset, int64_t kv_offset) {
  DT_KERNEL_ON_DEVICE(flex_attention, query, key, value, mask, score_mod, block_mask, block_size, scale, q_offset,
                      kv_offset);
  const Problem p =
      check("flex_attention", query, key, value, mask, score_mod, block_mask, block_size, scale, q_offset, kv_offset);
  return detail::dispatch_float(p.compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor q = query.to(p.compute).contiguous(), k = key.to(p.compute).contiguous(),
                 v = value.to(p.compute).contiguous();
    Tensor out = Tensor::zeros(with_tail(p.batch, p.L, p.Ev), p.compute);
    T* o = out.data<T>();
    const T* vp = v.data<T>();
    TileRows<T> rows(p, q.data<T>(), k.data<T>());
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t ti = 0; ti < p.nq; ++ti) {
        const int64_t r = rows.fill(b, ti), i0 = ti * p.bs;
        for (int64_t tj : rows.cols) {  // out rows += P[:, tile] @ V[tile]
          const int64_t j0 = tj * p.bs, c = std::min(p.bs, p.S - j0);
          gemm(false, false, r, p.Ev, c, T(1), rows.P.data() + j0, p.S, vp + (b * p.S + j0) * p.Ev, p.Ev, T(1),
               o + (b * p.L + i0) * p.Ev, p.Ev);
        }
      }
    return out.to(p.dtype);
  });
}

AttentionGrads flex_attention_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key,
                                       const Tensor& value, const Tensor& out, const FlexMask& mask,
                                       const FlexScoreMod& score_mod, const std::optional<Tensor>& block_mask,
                                       int64_t block_size, std::optional<double> scale, int64_t q_offset,
                                       int64_t kv_offset) {
  DT_KERNEL_ON_DEVICE(flex_attention_backward, grad_out, query, key, value, out, mask, score_mod, block_mask,
                      block_size, scale, q_offset, kv_offset);
  const char* op = "flex_attention_backward";
  const Problem p = check(op, query, key, value, mask, score_mod, block_mask, block_size, scale, q_offset, kv_offset);
  const Shape o_shape = with_tail(p.batch, p.L, p.Ev);
  DT_CHECK(grad_out.sizes() == o_shape && out.sizes() == o_shape && is_floating(grad_out.dtype()) &&
               is_floating(out.dtype()),
           op, ": grad_out ", dtype_name(grad_out.dtype()), " ", shape_str(grad_out.sizes()), " and out ",
           dtype_name(out.dtype()), " ", shape_str(out.sizes()), " must be floating ", shape_str(o_shape), " for ",
           attention_shapes_str(query, key, value));
  return detail::dispatch_float(p.compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor q = query.to(p.compute).contiguous(), k = key.to(p.compute).contiguous(),
                 v = value.to(p.compute).contiguous(), dout = grad_out.to(p.compute).contiguous(),
                 o = out.to(p.compute).contiguous();
    Tensor dq = Tensor::zeros(query.sizes(), p.compute), dk = Tensor::zeros(key.sizes(), p.compute),
           dv = Tensor::zeros(value.sizes(), p.compute);
    const T *qp = q.data<T>(), *kp = k.data<T>(), *vp = v.data<T>(), *gp = dout.data<T>(), *opd = o.data<T>();
    T *dqp = dq.data<T>(), *dkp = dk.data<T>(), *dvp = dv.data<T>();
    TileRows<T> rows(p, qp, kp);
    std::vector<T> dS(rows.Z.size());
    const T scl = static_cast<T>(p.scale), cap = static_cast<T>(p.soft_cap);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t ti = 0; ti < p.nq; ++ti) {
        const int64_t r = rows.fill(b, ti), i0 = ti * p.bs;
        if (rows.cols.empty()) continue;  // no key seen: zero gradients
        const T* g = gp + (b * p.L + i0) * p.Ev;
        const T* orow = opd + (b * p.L + i0) * p.Ev;
        for (int64_t tj : rows.cols) {  // dP = dO V^T on the tile's columns
          const int64_t j0 = tj * p.bs, c = std::min(p.bs, p.S - j0);
          gemm(false, true, r, c, p.Ev, T(1), g, p.Ev, vp + (b * p.S + j0) * p.Ev, p.Ev, T(0), dS.data() + j0, p.S);
        }
        for (int64_t rr = 0; rr < r; ++rr) {  // dS = P * (dP - D), times d(cap)/ds
          T d = 0;
          for (int64_t e = 0; e < p.Ev; ++e) d += g[rr * p.Ev + e] * orow[rr * p.Ev + e];
          T* ds = dS.data() + rr * p.S;
          const T* pr = rows.P.data() + rr * p.S;
          const T* z = rows.Z.data() + rr * p.S;
          for (int64_t tj : rows.cols)
            for (int64_t j = tj * p.bs, j1 = std::min(p.S, j + p.bs); j < j1; ++j) {
              // Masked: no gradient. (Eigen's float exp returns a tiny positive value rather than
              // 0 at -inf, so the test is on the score, not on P.)
              if (z[j] == -std::numeric_limits<T>::infinity()) {
                ds[j] = 0;
                continue;
              }
              ds[j] = pr[j] * (ds[j] - d);
              if (cap > T(0)) ds[j] *= T(1) - (z[j] / cap) * (z[j] / cap);
            }
        }
        for (int64_t tj : rows.cols) {
          const int64_t j0 = tj * p.bs, c = std::min(p.bs, p.S - j0);
          gemm(false, false, r, p.E, c, scl, dS.data() + j0, p.S, kp + (b * p.S + j0) * p.E, p.E, T(1),
               dqp + (b * p.L + i0) * p.E, p.E);
          gemm(true, false, c, p.E, r, scl, dS.data() + j0, p.S, qp + (b * p.L + i0) * p.E, p.E, T(1),
               dkp + (b * p.S + j0) * p.E, p.E);
          gemm(true, false, c, p.Ev, r, T(1), rows.P.data() + j0, p.S, g, p.Ev, T(1), dvp + (b * p.S + j0) * p.Ev,
               p.Ev);
        }
      }
    return AttentionGrads{dq.to(query.dtype()), dk.to(key.dtype()), dv.to(value.dtype())};
  });
}

}  // namespace dtensor::kernels
