// sort, sort.stable and topk (kernels/cpu/sort.h has the order: NaN largest, ties by index, so
// every sort is stable and sort.stable shares the kernel). Rules: ops/selection/sort_rules.cc;
// backward: ops/selection/sort_backward.cc.
#include "kernels/cpu/sort.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

int64_t sort_dim(const OpCall& c) {
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
  return guard(c, [&] { return wrap_dim(c.get_int("dim"), std::max<int64_t>(rank, 1), "dim"); });
}

// Few distinct values and some NaNs, so that ties and NaN placement are exercised.
Tensor ties_and_nans(int i, const OpCall& c, uint64_t seed) { return coarse_input(c.tensor(i), seed, true); }

OpDef& define_sort_op(Registry& reg, const std::string& schema, MetaFn meta, KernelFn kernel, SampleFn samples) {
  OpDef& op = reg.define(schema, "selection");
  op.cost = cost(CostClass::kOnePass);
  op.meta = std::move(meta);
  op.kernel = std::move(kernel);
  op.samples = std::move(samples);
  op.make_input = ties_and_nans;
  return op;
}

}  // namespace

void define_sort_ops(Registry& reg) {
  const auto sort_meta = [](const OpCall& c) {
    sort_dim(c);
    return std::vector<TensorMeta>{{c.tensor(0).shape, c.tensor(0).dtype}, {c.tensor(0).shape, DType::kInt64}};
  };
  const auto sort_kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    auto [values, indices] = kernels::sort(in[0], c.get_int("dim"), c.get_bool("descending"));
    return std::vector<Tensor>{values, indices};
  };
  define_sort_op(reg, "sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
                 sort_meta, sort_kernel, [] {
                   return std::vector<Sample>{sample({{7, 5}}, {T(0), I(0)}), sample({{4, 9}}, {T(0), I(1), V(true)}),
                                              sample({{3, 5, 4}}, {T(0)}, {}, {DType::kInt64})};
                 });
  define_sort_op(reg, "sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
                 sort_meta, sort_kernel, [] {
                   return std::vector<Sample>{sample({{6, 5}}, {T(0)}, {{"stable", V(true)}, {"dim", I(0)}}),
                                              sample({{4, 7}}, {T(0)}, {{"stable", V(true)}, {"descending", V(true)}})};
                 });
  define_sort_op(reg, "topk(Tensor self, int k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)",
                 [](const OpCall& c) {
                   const int64_t d = sort_dim(c);
                   Shape s = c.tensor(0).shape;
                   const int64_t n = s.empty() ? 1 : s[d], k = c.get_int("k");
                   if (k < 0 || k > n) fail(c, absl::StrCat("k = ", k, " is outside [0, ", n, "], the size of dim ", d));
                   if (!s.empty()) s[d] = k;
                   return std::vector<TensorMeta>{{s, c.tensor(0).dtype}, {s, DType::kInt64}};
                 },
                 [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
                   // sorted=False leaves the order to the implementation (torch's words): sorted here.
                   auto [values, indices] = kernels::topk(in[0], c.get_int("k"), c.get_int("dim"), c.get_bool("largest"));
                   return std::vector<Tensor>{values, indices};
                 },
                 [] {
                   return std::vector<Sample>{sample({{7, 5}}, {T(0), I(3), I(0)}),
                                              sample({{4, 9}}, {T(0), I(2), I(1), V(false)}),
                                              sample({{6, 4}}, {T(0), I(4)}, {}, {DType::kInt64})};
                 });
}

DTENSOR_FAMILY_PART("selection", kDefinitions, define_sort_ops);

}  // namespace dtensor::ops
