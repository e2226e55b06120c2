#include "kernels/cpu/attention.h"
#include "kernels/device_dispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/attention_shapes.h"
#include "kernels/cpu/blas_gemm.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vec_math.h"

namespace dtensor::kernels {
namespace {

using detail::attention_shapes_str;
using detail::gemm;

constexpr int64_t kBlock = 64;  // query rows per block

struct Problem : detail::AttentionShapes {
  double scale = 1;
};

Problem check(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
              const std::optional<Tensor>& mask, bool is_causal, std::optional<double> scale) {
  Problem p{detail::check_attention_shapes(op, q, k, v)};
  p.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(p.E));
  if (mask.has_value()) {
    DT_CHECK(!is_causal, op, ": attn_mask and is_causal=True are exclusive (accepted: one of them)");
    DT_CHECK(mask->dtype() == DType::kBool || is_floating(mask->dtype()), op, ": attn_mask must be bool or floating, got ",
             dtype_name(mask->dtype()));
    Shape scores = p.batch;
    scores.push_back(p.L);
    scores.push_back(p.S);
    const Shape& m = mask->sizes();
    bool fits = m.size() <= scores.size();
    for (size_t i = 0; fits && i < m.size(); ++i) {
      const int64_t want = scores[scores.size() - m.size() + i];
      fits = m[i] == want || m[i] == 1;
    }
    DT_CHECK(fits, op, ": attn_mask ", shape_str(mask->sizes()), " does not broadcast to ",
             shape_str(scores), " ([..., L, S])");
  }
  return p;
}

// Element (b, i, j) of the attention mask broadcast to [B, L, S].
template <typename T>
struct MaskView {
  Tensor holder;                // keeps the data alive
  const bool* bits = nullptr;   // bool mask
  const T* add = nullptr;       // floating mask, in the compute type
  std::vector<int64_t> base;    // per flattened batch index
  int64_t rs = 0, cs = 0;       // row / column strides
  bool active() const { return bits || add; }
};

template <typename T>
MaskView<T> mask_view(const std::optional<Tensor>& mask, const Problem& p) {
  MaskView<T> m;
  if (!mask.has_value()) return m;
  m.holder = mask->dtype() == DType::kBool ? mask->contiguous() : mask->to(DTypeOf<T>::value).contiguous();
  Shape scores = p.batch;
  scores.push_back(p.L);
  scores.push_back(p.S);
  Tensor e = m.holder.expand(scores);
  const int64_t nb = static_cast<int64_t>(p.batch.size());
  m.rs = e.stride(nb);
  m.cs = e.stride(nb + 1);
  m.base.assign(static_cast<size_t>(p.B), 0);
  for (int64_t b = 0; b < p.B; ++b) {
    int64_t rem = b, off = 0;
    for (int64_t d = nb - 1; d >= 0; --d) {
      off += (rem % p.batch[d]) * e.stride(d);
      rem /= p.batch[d];
    }
    m.base[b] = off;
  }
  if (mask->dtype() == DType::kBool) m.bits = m.holder.template data<bool>();
  else m.add = m.holder.template data<T>();
  return m;
}

template <typename T>
struct Inputs {
  const Problem& p;
  const T* q;
  const T* k;
  const MaskView<T>& mask;
  bool causal;
  int64_t query_offset;
};

// The probabilities of query rows [i0, i0 + r) of batch b into P[r, n] (row stride n) and returns
// n: the keys [0, n) that any of these rows can see (all S, or fewer under the causal mask).
// Masked entries and fully masked rows are 0. With `lse`, lse[rr] receives row rr's log-sum-exp of
// the scaled, masked scores (-inf for a fully masked row).
template <typename T>
int64_t probabilities(const Inputs<T>& x, int64_t b, int64_t i0, int64_t r, T* P, T* lse = nullptr) {
  const Problem& p = x.p;
  int64_t n = p.S;
  if (x.causal) n = std::clamp<int64_t>(x.query_offset + i0 + r, 0, p.S);
  if (n == 0) {
    if (lse) std::fill(lse, lse + r, -std::numeric_limits<T>::infinity());
    return 0;
  }
  gemm(false, true, r, n, p.E, static_cast<T>(p.scale), x.q + (b * p.L + i0) * p.E, p.E,
       x.k + b * p.S * p.E, p.E, T(0), P, n);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t rr = 0; rr < r; ++rr) {
    T* row = P + rr * n;
    const int64_t i = i0 + rr;
    if (x.mask.active()) {
      const int64_t at = x.mask.base[b] + i * x.mask.rs;
      if (x.mask.bits) {
        for (int64_t j = 0; j < n; ++j)
          if (!x.mask.bits[at + j * x.mask.cs]) row[j] = kNegInf;
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] += x.mask.add[at + j * x.mask.cs];
      }
    }
    // Keys past the causal limit are -inf: they add nothing to the max and exp() makes them 0
    // exactly, so the row's softmax runs over [0, lim) and the rest is zeroed (the same values,
    // without half the exp calls).
    const int64_t lim = x.causal ? std::clamp<int64_t>(x.query_offset + i + 1, 0, n) : n;
    std::fill(row + lim, row + n, T(0));
    T mx = kNegInf;
    for (int64_t j = 0; j < lim; ++j) mx = row[j] > mx ? row[j] : mx;
    if (mx == kNegInf) {  // every key masked: a zero row
      std::fill(row, row + lim, T(0));
      if (lse) lse[rr] = kNegInf;
      continue;
    }
    T sum = 0;
    if constexpr (std::is_same_v<T, float>) {
      sum = vec::exp_shifted_sum(row, lim, mx);
    } else {
      for (int64_t j = 0; j < lim; ++j) {
        row[j] = std::exp(row[j] - mx);
        sum += row[j];
      }
    }
    const T inv = T(1) / sum;
    for (int64_t j = 0; j < lim; ++j) row[j] *= inv;
    if (lse) lse[rr] = mx + std::log(sum);
  }
  return n;
}

Shape with_tail(const Shape& batch, int64_t a, int64_t b) {
  Shape s = batch;
  s.push_back(a);
  s.push_back(b);
  return s;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask, bool is_causal,
                                    std::optional<double> scale, int64_t query_offset) {
  DT_KERNEL_ON_DEVICE(scaled_dot_product_attention, query, key, value, attn_mask, is_causal, scale, query_offset);
  const Problem p =
      check("scaled_dot_product_attention", query, key, value, attn_mask, is_causal, scale);
  return detail::dispatch_float(p.compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor q = query.to(p.compute).contiguous(), k = key.to(p.compute).contiguous(),
                 v = value.to(p.compute).contiguous();
    const MaskView<T> mask = mask_view<T>(attn_mask, p);
    const Inputs<T> x{p, q.data<T>(), k.data<T>(), mask, is_causal, query_offset};
    Tensor out = Tensor::zeros(with_tail(p.batch, p.L, p.Ev), p.compute);
    T* o = out.data<T>();
    const T* vp = v.data<T>();
    std::vector<T> P(static_cast<size_t>(kBlock * std::max<int64_t>(p.S, 1)));
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t i0 = 0; i0 < p.L; i0 += kBlock) {
        const int64_t r = std::min(kBlock, p.L - i0);
        const int64_t n = probabilities(x, b, i0, r, P.data());
        if (n == 0) continue;  // rows stay 0
        gemm(false, false, r, p.Ev, n, T(1), P.data(), n, vp + b * p.S * p.Ev, p.Ev, T(0),
             o + (b * p.L + i0) * p.Ev, p.Ev);
      }
    }
    return out.to(p.dtype);
  });
}

AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                     const Tensor& key, const Tensor& value,
                                                     const Tensor& out, bool is_causal,
                                                     std::optional<double> scale,
                                                     const std::optional<Tensor>& attn_mask,
                                                     int64_t query_offset) {
  DT_KERNEL_ON_DEVICE(scaled_dot_product_attention_backward, grad_out, query, key, value, out, is_causal, scale, attn_mask, query_offset);
  const char* op = "scaled_dot_product_attention_backward";
  const Problem p = check(op, query, key, value, attn_mask, is_causal, scale);
  const Shape o_shape = with_tail(p.batch, p.L, p.Ev);
  DT_CHECK(grad_out.sizes() == o_shape && out.sizes() == o_shape && is_floating(grad_out.dtype()) &&
               is_floating(out.dtype()),
           op, ": grad_out ", dtype_name(grad_out.dtype()), " ", shape_str(grad_out.sizes()), " and out ",
           dtype_name(out.dtype()), " ", shape_str(out.sizes()), " must be floating ", shape_str(o_shape),
           " for ", attention_shapes_str(query, key, value));
  return detail::dispatch_float(p.compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor q = query.to(p.compute).contiguous(), k = key.to(p.compute).contiguous(),
                 v = value.to(p.compute).contiguous(), dout = grad_out.to(p.compute).contiguous(),
                 o = out.to(p.compute).contiguous();
    const MaskView<T> mask = mask_view<T>(attn_mask, p);
    const Inputs<T> x{p, q.data<T>(), k.data<T>(), mask, is_causal, query_offset};
    Tensor dq = Tensor::zeros(query.sizes(), p.compute), dk = Tensor::zeros(key.sizes(), p.compute),
           dv = Tensor::zeros(value.sizes(), p.compute);
    const T *qp = q.data<T>(), *kp = k.data<T>(), *vp = v.data<T>(), *gp = dout.data<T>(),
            *op_ = o.data<T>();
    T *dqp = dq.data<T>(), *dkp = dk.data<T>(), *dvp = dv.data<T>();
    const size_t block = static_cast<size_t>(kBlock * std::max<int64_t>(p.S, 1));
    std::vector<T> P(block), dS(block);
    const T scl = static_cast<T>(p.scale);
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t i0 = 0; i0 < p.L; i0 += kBlock) {
        const int64_t r = std::min(kBlock, p.L - i0);
        const int64_t n = probabilities(x, b, i0, r, P.data());
        if (n == 0) continue;  // no key seen: zero gradients
        const T* g = gp + (b * p.L + i0) * p.Ev;
        const T* orow = op_ + (b * p.L + i0) * p.Ev;
        // dP = dO V^T, then dS = P * (dP - D) in place.
        gemm(false, true, r, n, p.Ev, T(1), g, p.Ev, vp + b * p.S * p.Ev, p.Ev, T(0), dS.data(), n);
        for (int64_t rr = 0; rr < r; ++rr) {
          T d = 0;
          for (int64_t e = 0; e < p.Ev; ++e) d += g[rr * p.Ev + e] * orow[rr * p.Ev + e];
          T* ds = dS.data() + rr * n;
          const T* pr = P.data() + rr * n;
          for (int64_t j = 0; j < n; ++j) ds[j] = pr[j] * (ds[j] - d);
        }
        gemm(false, false, r, p.E, n, scl, dS.data(), n, kp + b * p.S * p.E, p.E, T(0),
             dqp + (b * p.L + i0) * p.E, p.E);
        gemm(true, false, n, p.E, r, scl, dS.data(), n, qp + (b * p.L + i0) * p.E, p.E, T(1),
             dkp + b * p.S * p.E, p.E);
        gemm(true, false, n, p.Ev, r, T(1), P.data(), n, g, p.Ev, T(1), dvp + b * p.S * p.Ev, p.Ev);
      }
    }
    return AttentionGrads{dq.to(query.dtype()), dk.to(key.dtype()), dv.to(value.dtype())};
  });
}

AttentionWithLse scaled_dot_product_attention_with_lse(const Tensor& query, const Tensor& key,
                                                        const Tensor& value, bool is_causal,
                                                        std::optional<double> scale,
                                                        int64_t query_offset) {
  DT_KERNEL_ON_DEVICE(scaled_dot_product_attention_with_lse, query, key, value, is_causal, scale,
                      query_offset);
  const char* op = "scaled_dot_product_attention_with_lse";
  const Problem p = check(op, query, key, value, std::nullopt, is_causal, scale);
  return detail::dispatch_float(p.compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor q = query.to(p.compute).contiguous(), k = key.to(p.compute).contiguous(),
                 v = value.to(p.compute).contiguous();
    const MaskView<T> mask = mask_view<T>(std::nullopt, p);
    const Inputs<T> x{p, q.data<T>(), k.data<T>(), mask, is_causal, query_offset};
    Tensor out = Tensor::zeros(with_tail(p.batch, p.L, p.Ev), p.compute);
    Shape lse_shape = p.batch;
    lse_shape.push_back(p.L);
    Tensor lse = Tensor::zeros(lse_shape, p.compute);
    T* o = out.data<T>();
    T* l = lse.data<T>();
    const T* vp = v.data<T>();
    std::vector<T> P(static_cast<size_t>(kBlock * std::max<int64_t>(p.S, 1)));
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t i0 = 0; i0 < p.L; i0 += kBlock) {
        const int64_t r = std::min(kBlock, p.L - i0);
        const int64_t n = probabilities(x, b, i0, r, P.data(), l + b * p.L + i0);
        if (n == 0) continue;
        gemm(false, false, r, p.Ev, n, T(1), P.data(), n, vp + b * p.S * p.Ev, p.Ev, T(0),
             o + (b * p.L + i0) * p.Ev, p.Ev);
      }
    }
    return AttentionWithLse{out, lse};
  });
}

}  // namespace dtensor::kernels
