// scaled_dot_product_attention forward / backward: argument checks, backend choice, and the
// math path (kernels in attention_kernels.cu: float32, float64 for float64 inputs, as the CPU kernel);
// the cuDNN path is attention_cudnn.cc.
#include <cmath>

#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

struct Problem {
  Shape batch;  // q's leading dims
  int64_t B = 1, L = 0, S = 0, E = 0, Ev = 0;
  double scale = 1;
};

Problem check(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
              const std::optional<Tensor>& mask, bool is_causal, std::optional<double> scale) {
  check_cuda(op, q, "query");
  check_same_device(op, q, k, "key");
  check_same_device(op, q, v, "value");
  check_floating(op, q, "query");
  DT_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
           ": query, key and value must "
           "share one dtype, got ",
           dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  DT_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op, ": query ",
           shape_str(q.sizes()), ", key ", shape_str(k.sizes()), " and value ",
           shape_str(v.sizes()),
           " must have the same rank >= 2 ([..., L, E], [..., S, E], [..., S, Ev])");
  Problem p;
  p.batch = Shape(q.sizes().begin(), q.sizes().end() - 2);
  DT_CHECK(Shape(k.sizes().begin(), k.sizes().end() - 2) == p.batch &&
               Shape(v.sizes().begin(), v.sizes().end() - 2) == p.batch &&
               k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2),
           op, ": query ", shape_str(q.sizes()), ", key ", shape_str(k.sizes()), " and value ",
           shape_str(v.sizes()),
           " do not match (accepted: [..., L, E], [..., S, E], [..., S, Ev] "
           "with equal batch dims)");
  DT_CHECK(static_cast<int>(p.batch.size()) <= kMaxDims, op, ": at most ", kMaxDims,
           " batch dims are supported on CUDA");
  p.B = numel(p.batch);
  p.L = q.size(-2), p.S = k.size(-2), p.E = q.size(-1), p.Ev = v.size(-1);
  p.scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(p.E)));
  if (mask.has_value()) {
    DT_CHECK(!is_causal, op, ": pass either attn_mask or is_causal, not both");
    check_same_device(op, q, *mask, "attn_mask");
    DT_CHECK(mask->dtype() == DType::kBool || is_floating(mask->dtype()), op,
             ": attn_mask must be bool or floating, got ", dtype_name(mask->dtype()));
    Shape full = p.batch;
    full.push_back(p.L);
    full.push_back(p.S);
    DT_CHECK(broadcast_shapes(mask->sizes(), full) == full, op, ": attn_mask ",
             shape_str(mask->sizes()), " does not broadcast to ", shape_str(full));
  }
  return p;
}

Attention params(const Problem& p, bool causal, int64_t query_offset, const Tensor& mask_f) {
  Attention a;
  a.query_offset = query_offset;
  a.batch = p.B, a.L = p.L, a.S = p.S, a.E = p.E, a.Ev = p.Ev;
  a.scale = p.scale;
  a.causal = causal;
  if (mask_f.defined()) {
    a.mask_kind = mask_f.dtype() == DType::kBool ? 1 : 2;
    Shape full = p.batch;
    full.push_back(p.L);
    full.push_back(p.S);
    Tensor e = mask_f.expand(full);
    a.mask = e.data_ptr();
    a.nbatch = static_cast<int>(p.batch.size());
    for (int d = 0; d < a.nbatch; ++d) {
      a.batch_sizes[d] = p.batch[d];
      a.mask_batch_strides[d] = e.stride(d);
    }
    a.mask_stride_l = e.stride(-2);
    a.mask_stride_s = e.stride(-1);
  }
  return a;
}

// The math path's compute dtype: float64 for float64 inputs, else float32 (the CPU kernel's rule).
DType compute_dtype(const Tensor& q) {
  return q.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

Tensor in_compute(const Tensor& t, DType c) { return contiguous(to(t, c)); }

Tensor prepared_mask(const std::optional<Tensor>& mask, DType c) {
  if (!mask.has_value()) return Tensor();
  return mask->dtype() == DType::kBool ? *mask : to(*mask, c);
}

template <typename T>
const T* cptr(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <typename T>
T* mptr(Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

Shape with(const Shape& batch, int64_t a, int64_t b) {
  Shape s = batch;
  if (a >= 0) s.push_back(a);
  if (b >= 0) s.push_back(b);
  return s;
}

// [..., s, d] as cuDNN's 4-d [b, h, s, d] (views when possible).
Tensor as4d(const Tensor& t) {
  if (t.dim() == 4) return t;
  if (t.dim() == 2) return t.view({1, 1, t.size(0), t.size(1)});
  if (t.dim() == 3) return t.unsqueeze(1);
  return reshape(t, {numel(Shape(t.sizes().begin(), t.sizes().end() - 3)), t.size(-3), t.size(-2),
                     t.size(-1)});
}

bool use_cudnn(const char* op, AttentionBackend backend, const Tensor& q, const Tensor& k,
               const Tensor& v, const std::optional<Tensor>& mask, int64_t query_offset) {
  if (backend == AttentionBackend::kMath) return false;
  std::string why = mask.has_value()    ? "an attn_mask is given (the cuDNN path takes none)"
                    : query_offset != 0 ? "query_offset is not 0 (the cuDNN path takes none)"
                                        : cudnn_sdpa_unsupported(q, k, v);
  if (backend == AttentionBackend::kCudnn)
    DT_CHECK(why.empty(), op, ": the cuDNN backend cannot run ", q.str(), ", ", k.str(), ", ",
             v.str(), ": ", why);
  return why.empty();
}

}  // namespace

bool cudnn_attention_built() { return cudnn_sdpa_built(); }

namespace {

// The checks of kernels/cpu/attention_merge.cc, for device tensors.
void check_merge_pair(const char* fn, const Tensor& a, const Tensor& b) {
  check_cuda(fn, a);
  check_same_device(fn, a, b, "second input");
  DT_CHECK(a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
               (a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64) && a.is_contiguous() &&
               b.is_contiguous(),
           fn, ": ", dtype_name(a.dtype()), " ", shape_str(a.sizes()), " and ", dtype_name(b.dtype()),
           " ", shape_str(b.sizes()), " (accepted: equal shapes, one dtype float32 or float64, contiguous)");
}

}  // namespace

std::pair<Tensor, Tensor> merge_attention(const Tensor& out, const Tensor& lse, const Tensor& out_b,
                                          const Tensor& lse_b) {
  const char* fn = "merge_attention";
  check_merge_pair(fn, out, out_b);
  check_merge_pair(fn, lse, lse_b);
  check_same_device(fn, out, lse, "lse");
  DT_CHECK(out.dim() >= 1 && out.dtype() == lse.dtype() &&
               Shape(out.sizes().begin(), out.sizes().end() - 1) == lse.sizes(),
           fn, ": out ", shape_str(out.sizes()), " and lse ", shape_str(lse.sizes()),
           " (accepted: out [..., L, Ev], lse [..., L] of one dtype)");
  DeviceGuard guard(out.device().index);
  Tensor out_new = Tensor::empty(out.sizes(), out.dtype(), out.device());
  Tensor lse_new = Tensor::empty(lse.sizes(), lse.dtype(), lse.device());
  const int64_t rows = lse.numel(), ev = out.size(-1);
  if (out.dtype() == DType::kFloat64) {
    launch_merge_attention(cptr<double>(out), cptr<double>(lse), cptr<double>(out_b),
                           cptr<double>(lse_b), mptr<double>(out_new), mptr<double>(lse_new), rows,
                           ev, stream_of(out));
  } else {
    launch_merge_attention(cptr<float>(out), cptr<float>(lse), cptr<float>(out_b),
                           cptr<float>(lse_b), mptr<float>(out_new), mptr<float>(lse_new), rows, ev,
                           stream_of(out));
  }
  check_launch(fn);
  return {out_new, lse_new};
}

Tensor attention_block_weight(const Tensor& lse_b, const Tensor& lse) {
  const char* fn = "attention_block_weight";
  check_merge_pair(fn, lse_b, lse);
  DeviceGuard guard(lse.device().index);
  Tensor w = Tensor::empty(lse.sizes(), lse.dtype(), lse.device());
  if (lse.dtype() == DType::kFloat64) {
    launch_attention_block_weight(cptr<double>(lse_b), cptr<double>(lse), mptr<double>(w),
                                  lse.numel(), stream_of(lse));
  } else {
    launch_attention_block_weight(cptr<float>(lse_b), cptr<float>(lse), mptr<float>(w),
                                  lse.numel(), stream_of(lse));
  }
  check_launch(fn);
  return w;
}

AttentionWithLse scaled_dot_product_attention_with_lse(
    const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& attn_mask,
    bool is_causal, std::optional<double> scale, int64_t query_offset, AttentionBackend backend) {
  const char* op = "scaled_dot_product_attention";
  const Problem p = check(op, q, k, v, attn_mask, is_causal, scale);
  DeviceGuard guard(q.device().index);
  if (use_cudnn(op, backend, q, k, v, attn_mask, query_offset)) {
    try {
      Tensor out, lse;
      cudnn_sdpa_forward(as4d(q), as4d(k), as4d(v), is_causal, p.scale, out, lse);
      return {out.view(with(p.batch, p.L, p.Ev)), lse.view(with(p.batch, p.L, -1))};
    } catch (const Error&) {
      if (backend == AttentionBackend::kCudnn) throw;  // kAuto: cuDNN refused, use the math path
    }
  }
  DT_CHECK(p.E <= kMaxHeadDim && p.Ev <= kMaxHeadDim, op, ": head dims ", p.E, " and ", p.Ev,
           " (accepted on the math path: at most ", kMaxHeadDim, ")");
  const DType c = compute_dtype(q);
  const Tensor qf = in_compute(q, c), kf = in_compute(k, c), vf = in_compute(v, c);
  const Tensor mask = prepared_mask(attn_mask, c);
  Tensor out = Tensor::empty(with(p.batch, p.L, p.Ev), c, q.device());
  Tensor lse = Tensor::empty(with(p.batch, p.L, -1), c, q.device());
  const Attention a = params(p, is_causal, query_offset, mask);
  if (c == DType::kFloat64) {
    launch_attention_forward(a, cptr<double>(qf), cptr<double>(kf), cptr<double>(vf),
                             mptr<double>(out), mptr<double>(lse), stream_of(q));
  } else {
    launch_attention_forward(a, cptr<float>(qf), cptr<float>(kf), cptr<float>(vf),
                             mptr<float>(out), mptr<float>(lse), stream_of(q));
  }
  check_launch(op);
  return {to(out, q.dtype()), lse};
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask, bool is_causal,
                                    std::optional<double> scale, int64_t query_offset,
                                    AttentionBackend backend) {
  return scaled_dot_product_attention_with_lse(q, k, v, attn_mask, is_causal, scale, query_offset,
                                               backend)
      .out;
}

AttentionGrads scaled_dot_product_attention_backward(
    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
    bool is_causal, std::optional<double> scale, const std::optional<Tensor>& attn_mask,
    int64_t query_offset, const std::optional<Tensor>& lse_in, AttentionBackend backend) {
  const char* op = "scaled_dot_product_attention_backward";
  const Problem p = check(op, q, k, v, attn_mask, is_causal, scale);
  check_same_device(op, q, dout, "grad_out");
  check_same_device(op, q, out, "out");
  DT_CHECK(dout.sizes() == with(p.batch, p.L, p.Ev) && out.sizes() == dout.sizes(), op,
           ": grad_out ", shape_str(dout.sizes()), " and out ", shape_str(out.sizes()),
           " do not match the forward's output shape ", shape_str(with(p.batch, p.L, p.Ev)));
  DeviceGuard guard(q.device().index);
  Tensor lse;
  if (lse_in.has_value()) {
    check_same_device(op, q, *lse_in, "lse");
    // The forward's lse is in the compute dtype; cuDNN's (bfloat16 / float16) is float32 too.
    const DType want = compute_dtype(q);
    DT_CHECK(lse_in->sizes() == with(p.batch, p.L, -1) && lse_in->dtype() == want, op, ": lse ",
             dtype_name(lse_in->dtype()), " ", shape_str(lse_in->sizes()),
             " does not match the forward (accepted: ", dtype_name(want), " ",
             shape_str(with(p.batch, p.L, -1)), ")");
    lse = contiguous(*lse_in);
  } else {
    lse = scaled_dot_product_attention_with_lse(q, k, v, attn_mask, is_causal, scale, query_offset,
                                                backend)
              .lse;
  }
  if (use_cudnn(op, backend, q, k, v, attn_mask, query_offset)) {
    try {
      Tensor dq, dk, dv;
      const Tensor q4 = as4d(q);
      cudnn_sdpa_backward(q4, as4d(k), as4d(v), as4d(contiguous(out)),
                          as4d(contiguous(to(dout, q.dtype()))),
                          lse.view({q4.size(0), q4.size(1), p.L}), is_causal, p.scale, dq, dk, dv);
      return {dq.view(q.sizes()), dk.view(k.sizes()), dv.view(v.sizes())};
    } catch (const Error&) {
      if (backend == AttentionBackend::kCudnn) throw;
    }
  }
  DT_CHECK(p.E <= kMaxHeadDim && p.Ev <= kMaxHeadDim, op, ": head dims ", p.E, " and ", p.Ev,
           " (accepted on the math path: at most ", kMaxHeadDim, ")");
  const DType c = compute_dtype(q);
  const Tensor qf = in_compute(q, c), kf = in_compute(k, c), vf = in_compute(v, c);
  const Tensor of = in_compute(out, c), gf = in_compute(dout, c), lf = in_compute(lse, c);
  const Tensor mask = prepared_mask(attn_mask, c);
  Tensor dq = Tensor::empty(q.sizes(), c, q.device());
  Tensor dk = Tensor::empty(k.sizes(), c, q.device());
  Tensor dv = Tensor::empty(v.sizes(), c, q.device());
  Tensor delta = Tensor::empty({std::max<int64_t>(p.B * p.L, 1)}, c, q.device());
  const Attention a = params(p, is_causal, query_offset, mask);
  if (c == DType::kFloat64) {
    launch_attention_backward(a, cptr<double>(qf), cptr<double>(kf), cptr<double>(vf),
                              cptr<double>(of), cptr<double>(lf), cptr<double>(gf), mptr<double>(dq),
                              mptr<double>(dk), mptr<double>(dv), mptr<double>(delta),
                              stream_of(q));
  } else {
    launch_attention_backward(a, cptr<float>(qf), cptr<float>(kf), cptr<float>(vf),
                              cptr<float>(of), cptr<float>(lf), cptr<float>(gf), mptr<float>(dq),
                              mptr<float>(dk), mptr<float>(dv), mptr<float>(delta), stream_of(q));
  }
  check_launch(op);
  return {to(dq, q.dtype()), to(dk, k.dtype()), to(dv, v.dtype())};
}

}  // namespace dtensor::kernels::cuda
