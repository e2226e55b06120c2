// flex_attention forward and backward on CUDA: argument checks (the CPU kernel's, on host
// metadata), the block mask (given, or built on the host from host copies of the document ids),
// then the float32 kernels of flex_attention_kernels.cu.
#include <cmath>

#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

// The kernel arguments of one call and the device buffers they point into.
struct Prepared {
  FlexAttention a;
  Shape batch;
  Tensor tiles, doc, slopes;
};

// The CPU kernel's argument checks (on host metadata), the block mask (given, or built on the host
// from host copies of the document ids), and the device copies of tiles, document ids and slopes.
Prepared prepare(const char* op, const Tensor& query, const Tensor& key, const Tensor& value, const FlexMask& mask,
                 const FlexScoreMod& score_mod, const std::optional<Tensor>& block_mask, int64_t block_size,
                 std::optional<double> scale, int64_t q_offset, int64_t kv_offset) {
  check_cuda(op, query, "query");
  check_same_device(op, query, key, "key");
  check_same_device(op, query, value, "value");
  check_floating(op, query, "query");
  DT_CHECK(query.dim() >= 2 && key.dim() == query.dim() && value.dim() == query.dim() &&
               key.dtype() == query.dtype() && value.dtype() == query.dtype(),
           op, ": query ", query.str(), ", key ", key.str(), " and value ", value.str(),
           " (accepted: [..., L, E], [..., S, E], [..., S, Ev] of one floating dtype)");
  const int64_t L = query.size(-2), S = key.size(-2), E = query.size(-1), Ev = value.size(-1);
  DT_CHECK(E <= kMaxHeadDim && Ev <= kMaxHeadDim, op, ": head dims ", E, " and ", Ev, " (accepted on CUDA: at most ",
           kMaxHeadDim, ")");
  // The tile map when none is given, built on the host (once per call; pass one to reuse it).
  FlexMask host_mask = mask;
  if (mask.document_ids) host_mask.document_ids = mask.document_ids->to(::dtensor::cpu());
  const Tensor tiles_host = block_mask ? block_mask->to(::dtensor::cpu())
                                       : kernels::create_block_mask(host_mask, L, S, block_size, q_offset, kv_offset);
  const int64_t rows0 = query.dim() >= 3 ? query.size(0) : 1;  // entries of dim 0 the rows index
  DT_CHECK(tiles_host.dtype() == DType::kInt32 && tiles_host.dim() == 3 &&
               (tiles_host.size(0) == 1 || tiles_host.size(0) == rows0) &&
               tiles_host.size(1) == (L + block_size - 1) / block_size &&
               tiles_host.size(2) == (S + block_size - 1) / block_size,
           op, ": block_mask ", tiles_host.str(), " does not fit L ", L, ", S ", S, ", block_size ", block_size);
  Prepared r;
  r.batch = Shape(query.sizes().begin(), query.sizes().end() - 2);
  FlexAttention& a = r.a;
  a.batch = numel(r.batch), a.L = L, a.S = S, a.E = E, a.Ev = Ev;
  a.scale = static_cast<float>(scale.value_or(1.0 / std::sqrt(static_cast<double>(E))));
  a.soft_cap = static_cast<float>(score_mod.soft_cap);
  a.heads = query.dim() >= 3 ? query.size(-3) : 1;
  a.per_b0 = query.dim() >= 3 && query.size(0) > 0 ? a.batch / query.size(0) : 1;
  a.q_offset = q_offset, a.kv_offset = kv_offset;
  a.causal = mask.is_causal, a.window = mask.window, a.prefix = mask.prefix_length;
  a.block = block_size, a.nq = tiles_host.size(1), a.nk = tiles_host.size(2), a.tile_rows = tiles_host.size(0);
  r.tiles = tiles_host.contiguous().to(query.device());
  a.tiles = static_cast<const int32_t*>(r.tiles.data_ptr());
  if (mask.document_ids) {
    const Tensor& d = *host_mask.document_ids;
    DT_CHECK(d.dtype() == DType::kInt64 && (d.dim() == 1 || (d.dim() == 2 && d.size(0) == rows0)) &&
                 q_offset >= 0 && kv_offset >= 0 && d.size(-1) >= q_offset + L &&
                 d.size(-1) >= kv_offset + S,
             op, ": document_ids ", d.str(), " (accepted: int64 [N] or [query.size(0), N] covering every position)");
    r.doc = d.contiguous().to(query.device());
    a.doc = static_cast<const int64_t*>(r.doc.data_ptr());
    a.doc_rows = d.dim() == 2 ? d.size(0) : 1;
    a.doc_n = d.size(-1);
  }
  if (score_mod.alibi_slopes) {
    DT_CHECK(score_mod.alibi_slopes->numel() == a.heads && query.dim() >= 3, op, ": alibi_slopes ",
             score_mod.alibi_slopes->str(), " (accepted: [query.size(-3)])");
    r.slopes = contiguous(to(score_mod.alibi_slopes->to(query.device()), DType::kFloat32));
    a.slopes = static_cast<const float*>(r.slopes.data_ptr());
  }
  return r;
}

const float* f32(const Tensor& t) { return static_cast<const float*>(t.data_ptr()); }
float* f32(Tensor& t) { return static_cast<float*>(t.data_ptr()); }

Shape with_rows(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

}  // namespace

Tensor flex_attention(const Tensor& query, const Tensor& key, const Tensor& value, const FlexMask& mask,
                      const FlexScoreMod& score_mod, const std::optional<Tensor>& block_mask, int64_t block_size,
                      std::optional<double> scale, int64_t q_offset, int64_t kv_offset) {
  const char* op = "flex_attention";
  check_cuda(op, query, "query");
  DeviceGuard guard(query.device().index);
  const Prepared p =
      prepare(op, query, key, value, mask, score_mod, block_mask, block_size, scale, q_offset, kv_offset);
  const Tensor qf = contiguous(to(query, DType::kFloat32)), kf = contiguous(to(key, DType::kFloat32)),
               vf = contiguous(to(value, DType::kFloat32));
  Tensor out = Tensor::empty(with_rows(p.batch, p.a.L, p.a.Ev), DType::kFloat32, query.device());
  launch_flex_attention_forward(p.a, f32(qf), f32(kf), f32(vf), f32(out), stream_of(query));
  check_launch(op);
  return to(out, query.dtype());
}

AttentionGrads flex_attention_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key,
                                       const Tensor& value, const Tensor& out, const FlexMask& mask,
                                       const FlexScoreMod& score_mod, const std::optional<Tensor>& block_mask,
                                       int64_t block_size, std::optional<double> scale, int64_t q_offset,
                                       int64_t kv_offset) {
  const char* op = "flex_attention_backward";
  check_cuda(op, query, "query");
  DeviceGuard guard(query.device().index);
  const Prepared p =
      prepare(op, query, key, value, mask, score_mod, block_mask, block_size, scale, q_offset, kv_offset);
  check_same_device(op, query, grad_out, "grad_out");
  check_same_device(op, query, out, "out");
  const Shape o_shape = with_rows(p.batch, p.a.L, p.a.Ev);
  DT_CHECK(grad_out.sizes() == o_shape && out.sizes() == o_shape && is_floating(grad_out.dtype()) &&
               is_floating(out.dtype()),
           op, ": grad_out ", grad_out.str(), " and out ", out.str(), " must be floating ", shape_str(o_shape),
           " for query ", query.str(), ", key ", key.str(), ", value ", value.str());
  const Tensor qf = contiguous(to(query, DType::kFloat32)), kf = contiguous(to(key, DType::kFloat32)),
               vf = contiguous(to(value, DType::kFloat32)), gf = contiguous(to(grad_out, DType::kFloat32)),
               of = contiguous(to(out, DType::kFloat32));
  Tensor dq = zeros(query.sizes(), DType::kFloat32, query.device()),
         dk = zeros(key.sizes(), DType::kFloat32, query.device()),
         dv = zeros(value.sizes(), DType::kFloat32, query.device());
  launch_flex_attention_backward(p.a, f32(qf), f32(kf), f32(vf), f32(gf), f32(of), f32(dq), f32(dk), f32(dv),
                                 stream_of(query));
  check_launch(op);
  return AttentionGrads{to(dq, query.dtype()), to(dk, key.dtype()), to(dv, value.dtype())};
}

}  // namespace dtensor::kernels::cuda
