// flex_attention, _flex_attention_backward and create_block_mask: PyTorch's FlexAttention
// (torch.nn.attention.flex_attention) with the mask and score modifier given as data rather than
// as Python functions. kernels/cpu/flex_attention.h defines the semantics; in the schema:
//   document_ids  int64 [N] or [query.size(0), N], N = L = S: query and key must share a document
//                 (jagged / packed sequences); the mask reads it at global positions, so it stays
//                 whole (replicated) when the query rows are sharded.
//   alibi_slopes  floating [H], H = query.size(-3): score += slope[h] * (key pos - query pos).
//   block_mask    int32 [1 or B0, ceil(L / block_size), ceil(S / block_size)] from
//                 create_block_mask on the same mask arguments: which tiles are empty (skipped),
//                 full (no mask evaluated) or partial; computed by the kernel when None.
//   is_causal, window (-1: none; keep |q - k| <= window), prefix_length (keys before it seen by
//   every query), soft_cap (0: none; score = soft_cap * tanh(score / soft_cap)), scale, block_size.
// create_block_mask(document_ids, ...) takes N = L = S from document_ids (pass zeros for a mask
// without documents); its output has no gradient (int32). Not supported: dropout, GQA, returning
// the log-sum-exp.
#include "kernels/cpu/flex_attention.h"

#include "dtensor/partial_split.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// Why PyTorch reaches none of these ops by an ATen name (OpDef::aten.not_aten).
constexpr char kNotAten[] = "dtensor's flex attention (torch's flex_attention is a higher-order op, not an ATen op)";

constexpr char kArgs[] =
    "Tensor? document_ids=None, Tensor? alibi_slopes=None, Tensor? block_mask=None, *, bool is_causal=False, "
    "int window=-1, int prefix_length=0, float soft_cap=0.0, float? scale=None, int block_size=64";

std::optional<double> scale_arg(const OpCall& c) {
  if (!c.has("scale")) return std::nullopt;
  return c.get_double("scale");
}

std::optional<Tensor> opt_input(const std::vector<Tensor>& in, const OpCall& c, const char* name) {
  const int i = c.tensor_index(name);
  if (i < 0) return std::nullopt;
  return in[i];
}

kernels::FlexMask mask_of(const std::vector<Tensor>& in, const OpCall& c) {
  kernels::FlexMask m;
  m.is_causal = c.get_bool("is_causal");
  m.window = c.get_int("window");
  m.prefix_length = c.get_int("prefix_length");
  m.document_ids = opt_input(in, c, "document_ids");
  return m;
}

kernels::FlexScoreMod score_mod_of(const std::vector<Tensor>& in, const OpCall& c) {
  kernels::FlexScoreMod s;
  s.alibi_slopes = opt_input(in, c, "alibi_slopes");
  s.soft_cap = c.get_double("soft_cap");
  return s;
}

// Checks query, key, value (tensors qi..qi + 2) and the mask arguments; returns the output shape.
Shape flex_shape(const OpCall& c, int qi) {
  const Shape out = attention_shape(c, qi);
  const Shape &q = c.tensor(qi).shape, &k = c.tensor(qi + 1).shape;
  const int64_t r = static_cast<int64_t>(q.size()), L = q[r - 2], S = k[r - 2];
  if (c.get_int("window") < -1) fail(c, absl::StrCat("window ", c.get_int("window"), " (accepted: -1 or >= 0)"));
  if (c.get_int("prefix_length") < 0) fail(c, "prefix_length must be >= 0");
  if (!(c.get_double("soft_cap") >= 0)) fail(c, "soft_cap must be >= 0 (0: none)");
  const int64_t bs = c.get_int("block_size");
  if (bs < 1) fail(c, absl::StrCat("block_size ", bs, " (accepted: >= 1)"));
  int64_t rows = 1;
  if (int d = c.tensor_index("document_ids"); d >= 0) {
    const TensorMeta& m = c.tensor(d);
    const bool ok = m.dtype == DType::kInt64 && L == S && m.shape.back() == L &&
                    (m.shape.size() == 1 || (m.shape.size() == 2 && r >= 3 && m.shape[0] == q[0]));
    if (!ok)
      fail(c, absl::StrCat("document_ids ", dtype_name(m.dtype), " ", shape_str(m.shape),
                           " (accepted: int64 [N] or [query.size(0), N] with N = L = S)"));
    if (m.shape.size() == 2) rows = m.shape[0];
  }
  if (int a = c.tensor_index("alibi_slopes"); a >= 0) {
    const TensorMeta& m = c.tensor(a);
    if (r < 3 || !is_floating(m.dtype) || m.shape != Shape{q[r - 3]})
      fail(c, absl::StrCat("alibi_slopes ", dtype_name(m.dtype), " ", shape_str(m.shape),
                           " (accepted: floating [H], H = query.size(-3), query of rank >= 3)"));
  }
  if (int b = c.tensor_index("block_mask"); b >= 0) {
    const TensorMeta& m = c.tensor(b);
    const Shape want{rows, (L + bs - 1) / bs, (S + bs - 1) / bs};
    if (m.dtype != DType::kInt32 || m.shape.size() != 3 || (m.shape[0] != 1 && m.shape[0] != rows) ||
        m.shape[1] != want[1] || m.shape[2] != want[2])
      fail(c, absl::StrCat("block_mask ", dtype_name(m.dtype), " ", shape_str(m.shape), " (accepted: int32 ",
                           shape_str(want), " or with 1 row, from create_block_mask with block_size ", bs, ")"));
  }
  return out;
}

// Zero blocks for a rank with an empty query/key/value block; errors prefixed with the call.
KernelFn guarded(KernelFn k, int qi) {
  return [k, qi](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    if (!ctx.single_device())
      for (int t = 0; t < qi + 3; ++t)
        if (in[t].numel() == 0) {
          std::vector<Tensor> out;
          for (size_t i = 0; i < ctx.out_meta.size(); ++i)
            out.push_back(Tensor::zeros(ctx.out_block(static_cast<int>(i)).first, ctx.out_meta[i].dtype));
          return out;
        }
    return guard(c, [&] { return k(in, c, ctx); });
  };
}

// Global positions of this rank's first query row and first key.
std::pair<int64_t, int64_t> offsets(const OpCall& c, const LocalContext& ctx, int qi) {
  const size_t r = c.tensor(qi).shape.size();
  return {ctx.in_block(c, qi).second[r - 2], ctx.in_block(c, qi + 1).second[r - 2]};
}

// Document ids of a few documents per row (lengths 3, shifted by the row), so that samples have
// empty, partial and full tiles; the block mask from them.
Tensor sample_documents(const Shape& s) {
  std::vector<int64_t> v(static_cast<size_t>(numel(s)));
  const int64_t n = s.back();
  for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<int64_t>(i) % n + static_cast<int64_t>(i) / n) / 3;
  return Tensor::from_vector(v, s);
}

Tensor make_flex_input(int i, const OpCall& c, uint64_t seed, int qi) {
  if (i == c.tensor_index("document_ids")) return sample_documents(c.tensor(i).shape);
  if (i == c.tensor_index("block_mask")) {
    kernels::FlexMask m;
    m.is_causal = c.get_bool("is_causal");
    m.window = c.get_int("window");
    m.prefix_length = c.get_int("prefix_length");
    if (int d = c.tensor_index("document_ids"); d >= 0) m.document_ids = sample_documents(c.tensor(d).shape);
    const size_t r = c.tensor(qi).shape.size();
    return kernels::create_block_mask(m, c.tensor(qi).shape[r - 2], c.tensor(qi + 1).shape[r - 2],
                                      c.get_int("block_size"));
  }
  return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
}

void define_forward(Registry& reg) {
  OpDef& op = reg.define(
      absl::StrCat("flex_attention(Tensor query, Tensor key, Tensor value, ", kArgs, ") -> Tensor"), "flex_attention");
  op.cost = cost(CostClass::kOnePass);
  op.aten.not_aten = kNotAten;
  op.aten.layout_dependent = true;  // the mask of a query block starts at its global offset
  op.meta = [](const OpCall& c) { return std::vector<TensorMeta>{{flex_shape(c, 0), c.tensor(0).dtype}}; };
  op.kernel = guarded(
      [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
        const auto [qo, ko] = offsets(c, ctx, 0);
        return std::vector<Tensor>{kernels::flex_attention(in[0], in[1], in[2], mask_of(in, c), score_mod_of(in, c),
                                                           opt_input(in, c, "block_mask"), c.get_int("block_size"),
                                                           scale_arg(c), qo, ko)};
      },
      0);
  op.make_input = [](int i, const OpCall& c, uint64_t seed) { return make_flex_input(i, c, seed, 0); };
  op.samples = [] {
    const auto F = DType::kFloat32, I64 = DType::kInt64, I32 = DType::kInt32;
    return std::vector<Sample>{
        sample({{2, 3, 9, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}, {2, 9}}, {T(0), T(1), T(2)},
               {{"document_ids", T(3)}, {"is_causal", V(true)}, {"block_size", I(4)}}, {F, F, F, I64}),
        sample({{2, 3, 9, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}, {3}}, {T(0), T(1), T(2)},
               {{"alibi_slopes", T(3)}, {"is_causal", V(true)}, {"window", I(3)}, {"soft_cap", V(1.5)},
                {"block_size", I(4)}}),
        sample({{2, 2, 8, 4}, {2, 2, 8, 4}, {2, 2, 8, 3}, {8}, {1, 2, 2}}, {T(0), T(1), T(2)},
               {{"document_ids", T(3)}, {"block_mask", T(4)}, {"prefix_length", I(2)}, {"is_causal", V(true)},
                {"block_size", I(4)}, {"scale", V(0.5)}},
               {F, F, F, I64, I32}),
        sample({{3, 7, 4}, {3, 7, 4}, {3, 7, 2}}, {T(0), T(1), T(2)}, {{"is_causal", V(true)}, {"block_size", I(2)}})};
  };
}

void define_backward(Registry& reg) {
  OpDef& op = reg.define(absl::StrCat("_flex_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor "
                                      "value, Tensor out, ",
                                      kArgs, ") -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)"),
                         "flex_attention");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  op.aten.not_aten = kNotAten;
  op.aten.layout_dependent = true;  // the mask of a query block starts at its global offset
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    const Shape out = flex_shape(c, 1);
    for (int t : {0, 4})
      if (c.tensor(t).shape != out || !is_floating(c.tensor(t).dtype))
        fail(c, absl::StrCat(t == 0 ? "grad_out" : "out", " must be floating ", shape_str(out), " ([..., L, Ev])"));
    return std::vector<TensorMeta>{c.tensor(1), c.tensor(2), c.tensor(3)};
  };
  op.kernel = guarded(
      [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
        const auto [qo, ko] = offsets(c, ctx, 1);
        kernels::AttentionGrads g = kernels::flex_attention_backward(
            in[0], in[1], in[2], in[3], in[4], mask_of(in, c), score_mod_of(in, c), opt_input(in, c, "block_mask"),
            c.get_int("block_size"), scale_arg(c), qo, ko);
        return std::vector<Tensor>{g.query, g.key, g.value};
      },
      1);
  op.samples = [] {
    const auto F = DType::kFloat32, I64 = DType::kInt64;
    return std::vector<Sample>{
        sample({{2, 3, 9, 5}, {2, 3, 9, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}, {2, 3, 9, 5}, {2, 9}, {3}},
               {T(0), T(1), T(2), T(3), T(4)},
               {{"document_ids", T(5)}, {"alibi_slopes", T(6)}, {"is_causal", V(true)}, {"soft_cap", V(2.0)},
                {"block_size", I(4)}},
               {F, F, F, F, F, I64, F}),
        sample({{3, 7, 2}, {3, 7, 4}, {3, 7, 4}, {3, 7, 2}, {3, 7, 2}}, {T(0), T(1), T(2), T(3), T(4)},
               {{"window", I(2)}, {"block_size", I(3)}})};
  };
  // Inputs from fixed seeds and out = the forward on them (D uses it); grad_out random.
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 0) return random_tensor(c.tensor(0).shape, c.tensor(0).dtype, seed);
    auto make = [&](int t) { return make_flex_input(t, c, 0xf1e7ull + static_cast<uint64_t>(t), 1); };
    if (i != 4) return make(i);
    std::vector<Tensor> in(static_cast<size_t>(c.num_tensors()));
    for (int t = 1; t < c.num_tensors(); ++t)
      if (t != 4) in[t] = make(t);
    return kernels::flex_attention(in[1], in[2], in[3], mask_of(in, c), score_mod_of(in, c),
                                   opt_input(in, c, "block_mask"), c.get_int("block_size"), scale_arg(c), 0, 0);
  };
}

void define_block_mask(Registry& reg) {
  OpDef& op = reg.define(
      "create_block_mask(Tensor document_ids, *, bool is_causal=False, int window=-1, int prefix_length=0, int "
      "block_size=64) -> Tensor",
      "flex_attention");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  op.aten.not_aten = kNotAten;
  op.no_backward = "an int32 tile map of the mask (no gradient)";
  op.meta = [](const OpCall& c) {
    const TensorMeta& d = c.tensor(0);
    if (d.dtype != DType::kInt64 || d.shape.empty() || d.shape.size() > 2)
      fail(c, "document_ids must be int64 [N] or [B0, N]");
    const int64_t bs = c.get_int("block_size");
    if (bs < 1) fail(c, absl::StrCat("block_size ", bs, " (accepted: >= 1)"));
    if (c.get_int("window") < -1 || c.get_int("prefix_length") < 0)
      fail(c, "window must be -1 or >= 0 and prefix_length >= 0");
    const int64_t n = d.shape.back(), tiles = (n + bs - 1) / bs;
    return std::vector<TensorMeta>{{Shape{d.shape.size() == 2 ? d.shape[0] : 1, tiles, tiles}, DType::kInt32}};
  };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    return guard(c, [&] {
      kernels::FlexMask m = mask_of(in, c);
      m.document_ids = in[0];
      const int64_t n = in[0].size(-1);
      return std::vector<Tensor>{kernels::create_block_mask(m, n, n, c.get_int("block_size"))};
    });
  };
  op.make_input = [](int i, const OpCall& c, uint64_t) { return sample_documents(c.tensor(i).shape); };
  op.samples = [] {
    return std::vector<Sample>{
        sample({{4, 10}}, {T(0)}, {{"is_causal", V(true)}, {"block_size", I(4)}}, {DType::kInt64}),
        sample({{9}}, {T(0)}, {{"window", I(2)}, {"prefix_length", I(3)}, {"block_size", I(2)}}, {DType::kInt64})};
  };
}

}  // namespace

void define_flex_attention_ops(Registry& reg) {
  define_forward(reg);
  define_backward(reg);
  define_block_mask(reg);
}

DTENSOR_FAMILY_PART("flex_attention", kDefinitions, define_flex_attention_ops);

}  // namespace dtensor::ops
