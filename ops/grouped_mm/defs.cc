// grouped_mm (torch._grouped_mm; forms and errors in kernels/cpu/grouped_mm.h). Its gradients are
// grouped_mm calls of other forms (ops/grouped_mm/backward.cc), so no backward op is needed.
#include <algorithm>

#include "dtensor/partial_split.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// The forms, by operand ranks.
enum class Form { kRows, kContraction, kCols, kBatched };  // 2x3, 2x2, 3x2, 3x3

Form form_of(const OpCall& c) {
  const size_t ra = c.tensor(0).shape.size(), rb = c.tensor(1).shape.size();
  if (ra == 2) return rb == 3 ? Form::kRows : Form::kContraction;
  return rb == 2 ? Form::kCols : Form::kBatched;
}

std::vector<TensorMeta> grouped_mm_meta(const OpCall& c) {
  const Shape &a = c.tensor(0).shape, &b = c.tensor(1).shape;
  for (int t = 0; t < 2; ++t)
    if (!is_floating(c.tensor(t).dtype))
      fail(c, absl::StrCat("operand ", t, " has dtype ", dtype_name(c.tensor(t).dtype),
                           "; accepted: float32, float64, bfloat16, float16"));
  if (c.tensor(0).dtype != c.tensor(1).dtype) fail(c, "operands must share one dtype");
  if (a.size() < 2 || a.size() > 3 || b.size() < 2 || b.size() > 3)
    fail(c, "accepted: a[M, K] or a[G, M, K] with b[K, N] or b[G, K, N]");
  if (a.back() != b[b.size() - 2])
    fail(c, absl::StrCat("contraction dims differ: ", shape_str(a), " @ ", shape_str(b)));
  const int oi = c.tensor_index("offs");
  const Form f = form_of(c);
  if ((oi >= 0) == (f == Form::kBatched))
    fail(c, f == Form::kBatched ? "3-d x 3-d takes no offs" : "offs are required unless both operands are 3-d");
  if (f == Form::kBatched) {
    if (a[0] != b[0]) fail(c, "group counts differ");
    return {{{a[0], a[1], b[2]}, c.tensor(0).dtype}};
  }
  const TensorMeta& o = c.tensor(oi);
  if (o.dtype != DType::kInt32 || o.shape.size() != 1)
    fail(c, "offs must be a 1-d int32 tensor of cumulative group ends");
  const int64_t G = o.shape[0];
  if ((f == Form::kRows && b[0] != G) || (f == Form::kCols && a[0] != G))
    fail(c, absl::StrCat("offs has ", G, " entries but the 3-d operand has ", f == Form::kRows ? b[0] : a[0],
                         " groups"));
  const int64_t M = a[a.size() - 2], N = b.back();
  if (f == Form::kContraction) return {{{G, M, N}, c.tensor(0).dtype}};
  return {{{M, N}, c.tensor(0).dtype}};
}

// The kernel on this rank's blocks. Only the rows form has grouped-dim shards (rows of a: S(0) of
// a; groups of b: S(0) of b): the global offsets are cut to the local row range and groups, and rows
// of groups held elsewhere stay zero (the rule makes that output Partial).
std::vector<Tensor> local_grouped_mm(const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
  const int oi = c.tensor_index("offs");
  if (oi < 0) return {kernels::grouped_mm(in[0], in[1], std::nullopt)};
  if (form_of(c) != Form::kRows || ctx.single_device()) return {kernels::grouped_mm(in[0], in[1], in[oi])};
  const int64_t r0 = ctx.in_block(c, 0).second[0], g0 = ctx.in_block(c, 1).second[0];
  const int64_t rows = in[0].size(0), groups = in[1].size(0);
  const std::vector<int64_t> ends =
      kernels::grouped_mm_offsets(in[oi].to(cpu()), c.tensor(oi).shape[0], c.tensor(0).shape[0], "grouped_mm");
  auto local = [&](int64_t e) { return std::clamp<int64_t>(e - r0, 0, rows); };
  const int64_t start = local(g0 == 0 ? 0 : ends[g0 - 1]);
  std::vector<int32_t> lo(groups);
  for (int64_t g = 0; g < groups; ++g) lo[g] = static_cast<int32_t>(local(ends[g0 + g]) - start);
  Tensor out = Tensor::zeros({rows, in[1].size(2)}, in[0].dtype(), in[0].device());
  Tensor part = kernels::grouped_mm(in[0].narrow(0, start, rows - start), in[1],
                                    Tensor::from_vector(lo, {groups}).to(in[0].device()));
  out.narrow(0, start, rows - start).copy_(part);
  return {out};
}

// Errors (bad offsets) name the call: op, global shapes and placements.
std::vector<Tensor> grouped_mm_kernel(const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
  return guard(c, [&] { return local_grouped_mm(in, c, ctx); });
}

// Valid offsets for the samples: sorted draws in [0, extent] (empty groups and trailing rows occur).
Tensor offs_input(const OpCall& c, int oi, uint64_t seed) {
  const int64_t G = c.tensor(oi).shape[0];
  const Form f = form_of(c);
  const Shape &a = c.tensor(0).shape, &b = c.tensor(1).shape;
  const int64_t extent = f == Form::kRows ? a[0] : f == Form::kContraction ? a[1] : b[1];
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(G);
  for (auto& e : v) e = static_cast<int32_t>(rng() % static_cast<uint64_t>(extent + 1));
  std::sort(v.begin(), v.end());
  return Tensor::from_vector(v, {G});
}

}  // namespace

void define_grouped_mm_ops(Registry& reg) {
  OpDef& op = reg.define("grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None) -> Tensor", "grouped_mm");
  // 2 M K N in total for the 2-d forms (the groups split M or K); per group for 3-d x 3-d; for
  // a[G, M, K] @ b[K, N] the groups split N, so 2 M K N.
  op.cost = cost(CostClass::kContraction);
  op.aten.layout_dependent = true;  // offs are global group ends; a row block shifts them
  // ATen's _grouped_mm(self, mat2, offs, bias, out_dtype): bias and out_dtype must be None.
  op.aten.aliases = {{"_grouped_mm", "grouped_mm"}};
  op.cost.flops = [](const OpCall& c, const std::vector<TensorMeta>&) {
    const Shape &a = c.tensor(0).shape, &b = c.tensor(1).shape;
    const double mk = static_cast<double>(form_of(c) == Form::kCols ? a[1] * a[2] : numel(a));
    return 2 * mk * static_cast<double>(b.back());
  };
  op.meta = grouped_mm_meta;
  op.kernel = grouped_mm_kernel;
  op.samples = [] {
    const DType f = DType::kFloat32, i = DType::kInt32;
    return std::vector<Sample>{
        sample({{9, 5}, {3, 5, 4}, {3}}, {T(0), T(1), T(2)}, {}, {f, f, i}),
        sample({{4, 9}, {9, 6}, {3}}, {T(0), T(1), T(2)}, {}, {f, f, i}),
        sample({{3, 4, 5}, {5, 8}, {3}}, {T(0), T(1), T(2)}, {}, {f, f, i}),
        sample({{3, 4, 5}, {3, 5, 6}}, {T(0), T(1)}),
        sample({{6, 4}, {2, 4, 3}, {2}}, {T(0), T(1), T(2)}, {}, {DType::kFloat64, DType::kFloat64, i})};
  };
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == c.tensor_index("offs")) return offs_input(c, i, seed);
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

DTENSOR_FAMILY_PART("grouped_mm", kDefinitions, define_grouped_mm_ops);

}  // namespace dtensor::ops
