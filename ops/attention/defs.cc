// scaled_dot_product_attention and _scaled_dot_product_attention_backward (kernels/cpu/attention.h
// has the semantics). Rules (ops/attention/rules.cc) shard batch dims alike, or the query rows
// (dim -2 of query and out) with key and value replicated: the kernel then gets the global position
// of its first query row for the causal mask, and the attn_mask rows that line up with its queries.
// The backward takes the forward's attn_mask as an optional keyword argument (an addition to the
// schema autograd calls, which passes is_causal and scale). Not supported: dropout (dropout_p must
// be 0), key/value sequence sharding (ring attention).
#include <algorithm>

#include "dtensor/partial_split.h"
#include "kernels/cpu/attention.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

constexpr uint64_t kFixedSeed = 0xa77e5eedull;

std::optional<double> scale_arg(const OpCall& c) {
  if (!c.has("scale")) return std::nullopt;
  return c.get_double("scale");
}

// The part of a broadcasting input's local block that lines up with a block (shape, offset) of the
// global shape `target` it broadcasts to: along every dim that is not broadcast the input's block
// (at local_offset) is cut to the block's range. The rules give the input either the block's
// shard or the whole dim.
Tensor align_block(const Tensor& local, const Shape& global, const Shape& local_offset, const Shape& target,
                   const Shape& shape, const Shape& offset) {
  Tensor t = local;
  const size_t lead = target.size() - global.size();
  for (size_t d = 0; d < global.size(); ++d) {
    if (global[d] != target[lead + d]) continue;  // broadcast
    const int64_t at = offset[lead + d] - local_offset[d];
    DT_CHECK(at >= 0 && at + shape[lead + d] <= t.size(static_cast<int64_t>(d)), "internal: attn_mask block ",
             shape_str(t.sizes()), " at ", shape_str(local_offset), " does not cover the scores block ",
             shape_str(shape), " at ", shape_str(offset));
    t = t.narrow(static_cast<int64_t>(d), at, shape[lead + d]);
  }
  return t;
}

// Zero blocks of every output for a rank with an empty input block (empty outputs, or Partial
// pieces whose identity is 0); errors prefixed with the call.
KernelFn guarded(KernelFn k) {
  return [k](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    if (!ctx.single_device())
      for (const Tensor& t : in)
        if (t.numel() == 0) {
          std::vector<Tensor> out;
          for (size_t i = 0; i < ctx.out_meta.size(); ++i)
            out.push_back(Tensor::zeros(ctx.out_block(static_cast<int>(i)).first, ctx.out_meta[i].dtype));
          return out;
        }
    return guard(c, [&] { return k(in, c, ctx); });
  };
}

// Checks attn_mask (tensor mi) against the scores [..., L, S] of an output `out` [..., L, Ev]
// with S keys.
void check_mask(const OpCall& c, int mi, const Shape& out, int64_t S) {
  if (c.get_bool("is_causal")) fail(c, "attn_mask and is_causal=True are exclusive (accepted: one of them)");
  const DType md = c.tensor(mi).dtype;
  if (md != DType::kBool && !is_floating(md))
    fail(c, absl::StrCat("attn_mask must be bool (True = attend) or floating (added), got ", dtype_name(md)));
  Shape scores = out;
  scores.back() = S;
  const Shape& m = c.tensor(mi).shape;
  bool fits = m.size() <= scores.size();
  for (size_t i = 0; fits && i < m.size(); ++i) {
    const int64_t want = scores[scores.size() - m.size() + i];
    fits = m[i] == want || m[i] == 1;
  }
  if (!fits) fail(c, absl::StrCat("attn_mask must broadcast to ", shape_str(scores), " ([..., L, S])"));
}

// This rank's part of attn_mask: the rows and batch entries of its block of the scores [..., L, S]
// (query qi's block with all S keys of key ki); none without a mask.
std::optional<Tensor> local_mask(const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx, int qi,
                                 int ki) {
  const int mi = c.tensor_index("attn_mask");
  if (mi < 0) return std::nullopt;
  const int64_t r = static_cast<int64_t>(c.tensor(qi).shape.size());
  const auto qb = ctx.in_block(c, qi);
  Shape target = c.tensor(qi).shape, shape = qb.first, offset = qb.second;
  target.back() = shape.back() = c.tensor(ki).shape[r - 2];
  offset.back() = 0;
  return align_block(in[mi], c.tensor(mi).shape, ctx.in_block(c, mi).second, target, shape, offset);
}

// Matrix FLOPs of attention over query rows [..., L, E] and keys [..., S, E], values [..., S, Ev]:
// QK^T and PV are 2 L S (E + Ev) per batch entry; the backward recomputes QK^T and runs four more
// (dV, dP, dQ, dK), 2 L S (3 E + 2 Ev). A causal mask's skipped half is not subtracted (upper bound).
OpCost attention_cost(int q, bool backward) {
  OpCost c = cost(CostClass::kContraction, backward ? Keeps::kNothing : Keeps::kInputs);
  c.flops = [q, backward](const OpCall& call, const std::vector<TensorMeta>&) {
    const Shape& qs = call.tensor(q).shape;
    const Shape& ks = call.tensor(q + 1).shape;
    const Shape& vs = call.tensor(q + 2).shape;
    const double rows = static_cast<double>(numel(qs)) / static_cast<double>(std::max<int64_t>(qs.back(), 1));
    const double S = static_cast<double>(ks[ks.size() - 2]), E = static_cast<double>(qs.back()),
                 Ev = static_cast<double>(vs.back());
    return 2 * rows * S * (backward ? 3 * E + 2 * Ev : E + Ev);
  };
  return c;
}

void define_forward(Registry& reg) {
  OpDef& op = reg.define(
      "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, float? scale=None) -> Tensor",
      "attention");
  op.cost = attention_cost(0, false);
  op.aten.layout_dependent = true;  // a causal mask of a query block starts at its global offset
  op.meta = [](const OpCall& c) {
    Shape out = attention_shape(c, 0);
    if (c.get_double("dropout_p") != 0.0)
      fail(c, absl::StrCat("dropout_p ", c.get_double("dropout_p"),
                           " is not supported (accepted: dropout_p=0.0; dropout is not implemented)"));
    const int mi = c.tensor_index("attn_mask");
    if (mi >= 0) check_mask(c, mi, out, c.tensor(1).shape[out.size() - 2]);
    return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const int64_t r = static_cast<int64_t>(c.tensor(0).shape.size());
    const int64_t offset = ctx.in_block(c, 0).second[r - 2];  // global row of the first query
    return std::vector<Tensor>{kernels::scaled_dot_product_attention(
        in[0], in[1], in[2], local_mask(in, c, ctx, 0, 1), c.get_bool("is_causal"), scale_arg(c), offset)};
  });
  op.samples = [] {
    const auto B = DType::kBool;
    const auto F = DType::kFloat32;
    return std::vector<Sample>{
        sample({{2, 5, 4}, {2, 7, 4}, {2, 7, 3}}, {T(0), T(1), T(2)}),
        sample({{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}}, {T(0), T(1), T(2)}, {{"is_causal", V(true)}}),
        sample({{3, 7, 4}, {3, 5, 4}, {3, 5, 2}}, {T(0), T(1), T(2)},
               {{"is_causal", V(true)}, {"scale", V(0.7)}}),
        sample({{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}, {5, 7}}, {T(0), T(1), T(2), T(3)}, {}, {F, F, F, B}),
        sample({{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}, {2, 1, 5, 7}}, {T(0), T(1), T(2), T(3)}),
        sample({{3, 5, 4}, {3, 7, 4}, {3, 7, 3}, {7}}, {T(0), T(1), T(2), T(3)}, {{"scale", V(0.3)}},
               {F, F, F, B}),
        // Self-attention (L == S): the ring attention rows apply.
        sample({{2, 6, 4}, {2, 6, 4}, {2, 6, 3}}, {T(0), T(1), T(2)}, {{"is_causal", V(true)}})};
  };
}

void define_backward(Registry& reg) {
  OpDef& op = reg.define(
      "_scaled_dot_product_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, bool is_causal=False, *, float? scale=None, Tensor? attn_mask=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)",
      "attention");
  op.cost = attention_cost(1, true);
  op.aten.layout_dependent = true;  // a causal mask of a query block starts at its global offset
  op.aten.not_aten =
      "dtensor's SDPA backward; ATen's is per kernel: the bridge's handler of the CPU flash backward "
      "(torch_bridge._sdpa_flash_cpu_backward) calls it, repeating grouped key/value heads";
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    Shape out = attention_shape(c, 1);
    for (int t : {0, 4}) {
      if (c.tensor(t).shape != out || !is_floating(c.tensor(t).dtype))
        fail(c, absl::StrCat(t == 0 ? "grad_out" : "out", " must be floating ", shape_str(out), " ([..., L, Ev])"));
    }
    const int mi = c.tensor_index("attn_mask");
    if (mi >= 0) check_mask(c, mi, out, c.tensor(2).shape[out.size() - 2]);
    return std::vector<TensorMeta>{c.tensor(1), c.tensor(2), c.tensor(3)};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const int64_t r = static_cast<int64_t>(c.tensor(1).shape.size());
    const int64_t offset = ctx.in_block(c, 1).second[r - 2];
    kernels::AttentionGrads g = kernels::scaled_dot_product_attention_backward(
        in[0], in[1], in[2], in[3], in[4], c.get_bool("is_causal"), scale_arg(c), local_mask(in, c, ctx, 1, 2),
        offset);
    return std::vector<Tensor>{g.query, g.key, g.value};
  });
  op.samples = [] {
    return std::vector<Sample>{
        sample({{2, 5, 3}, {2, 5, 4}, {2, 7, 4}, {2, 7, 3}, {2, 5, 3}}, {T(0), T(1), T(2), T(3), T(4)}),
        sample({{2, 3, 5, 6}, {2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}, {2, 3, 5, 6}},
               {T(0), T(1), T(2), T(3), T(4)}, {{"is_causal", V(true)}, {"scale", V(0.6)}}),
        sample({{3, 7, 2}, {3, 7, 4}, {3, 5, 4}, {3, 5, 2}, {3, 7, 2}}, {T(0), T(1), T(2), T(3), T(4), V(true)}),
        sample({{2, 3, 5, 6}, {2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}, {2, 3, 5, 6}, {5, 7}},
               {T(0), T(1), T(2), T(3), T(4)}, {{"attn_mask", T(5)}},
               {DType::kFloat32, DType::kFloat32, DType::kFloat32, DType::kFloat32, DType::kFloat32, DType::kBool}),
        sample({{2, 3, 5, 6}, {2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}, {2, 3, 5, 6}, {2, 1, 5, 7}},
               {T(0), T(1), T(2), T(3), T(4)}, {{"attn_mask", T(5)}}),
        sample({{2, 6, 3}, {2, 6, 4}, {2, 6, 4}, {2, 6, 3}, {2, 6, 3}}, {T(0), T(1), T(2), T(3), T(4)},
               {{"is_causal", V(true)}})};
  };
  // query, key, value and attn_mask from fixed seeds and out = the forward on them; grad_out
  // random.
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 0) return random_tensor(c.tensor(0).shape, c.tensor(0).dtype, seed);
    auto make = [&](int t) { return random_tensor(c.tensor(t).shape, c.tensor(t).dtype, kFixedSeed + t); };
    const int mi = c.tensor_index("attn_mask");
    if (i != 4) return make(i);
    std::optional<Tensor> mask;
    if (mi >= 0) mask = make(mi);
    return kernels::scaled_dot_product_attention(make(1), make(2), make(3), mask, c.get_bool("is_causal"),
                                                 scale_arg(c));
  };
}

}  // namespace

Shape attention_shape(const OpCall& c, int qi) {
  const Shape &q = c.tensor(qi).shape, &k = c.tensor(qi + 1).shape, &v = c.tensor(qi + 2).shape;
  const std::string accepted =
      "accepted: query [..., L, E], key [..., S, E], value [..., S, Ev] of one rank >= 2 with identical batch dims";
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size()) fail(c, accepted);
  for (size_t d = 0; d + 2 < q.size(); ++d)
    if (k[d] != q[d] || v[d] != q[d]) fail(c, "batch dims differ; " + accepted);
  if (k.back() != q.back() || v[v.size() - 2] != k[k.size() - 2]) fail(c, accepted);
  const DType dt = c.tensor(qi).dtype;
  if (!is_floating(dt) || c.tensor(qi + 1).dtype != dt || c.tensor(qi + 2).dtype != dt)
    fail(c, "query, key and value must share one floating dtype");
  Shape out = q;
  out.back() = v.back();
  return out;
}

void define_attention_ops(Registry& reg) {
  define_forward(reg);
  define_backward(reg);
}

DTENSOR_FAMILY_PART("attention", kDefinitions, define_attention_ops);

}  // namespace dtensor::ops
