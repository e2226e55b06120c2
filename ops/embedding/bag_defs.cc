// _embedding_bag (nn.EmbeddingBag's op; ATen's schema, and _embedding_bag_forward_only, the same op
// without autograd, as its alias): weight [V, D], indices [n], offsets [B] or [B + 1] with
// include_last_offset, per_sample_weights [n]? -> (output [B, D], offset2bag [n], bag_size [B],
// max_indices [B] or [B, D] for max), ATen's CPU outputs (kernels/cpu/embedding_bag.h). The kernel
// reads its weight block's rows (a vocabulary shard sums only its rows), so it is layout-dependent:
// the bridge runs it, not ATen on the block. Rules: bag_rules.cc; backward: bag_backward.cc.
#include "kernels/cpu/embedding_bag.h"

#include "dtensor/partial_split.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

void check_index(const OpCall& c, int t, const char* name) {
  const TensorMeta& m = c.tensor(t);
  if (m.shape.size() != 1 || (m.dtype != DType::kInt64 && m.dtype != DType::kInt32))
    fail(c, absl::StrCat(name, " ", dtype_name(m.dtype), shape_str(m.shape), "; accepted: a 1-d int64 or int32 tensor"));
}

void define_embedding_bag(Registry& reg) {
  OpDef& op = reg.define(
      "_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, "
      "bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) "
      "-> (Tensor, Tensor, Tensor, Tensor)",
      "embedding");
  op.cost = cost(CostClass::kCopy, Keeps::kInputsAndOutput);
  op.aten.layout_dependent = true;  // a vocabulary shard reduces only the rows it holds
  op.aten.aliases = {{"_embedding_bag_forward_only", ""}};
  op.meta = [](const OpCall& c) {
    const TensorMeta& w = c.tensor(0);
    if (w.shape.size() != 2 || !is_floating(w.dtype))
      fail(c, absl::StrCat("weight ", dtype_name(w.dtype), shape_str(w.shape), "; accepted: a floating [V, D] table"));
    check_index(c, 1, "indices");
    check_index(c, 2, "offsets");
    const int64_t mode = c.get_int("mode");
    if (mode < 0 || mode > 2) fail(c, absl::StrCat("mode ", mode, "; accepted: 0 (sum), 1 (mean), 2 (max)"));
    const int64_t n = c.tensor(1).shape[0], o = c.tensor(2).shape[0];
    const bool last = c.get_bool("include_last_offset");
    const int64_t bags = last ? std::max<int64_t>(o - 1, 0) : o;
    const int p = c.tensor_index("per_sample_weights");
    if (p >= 0 && (mode != 0 || c.tensor(p).shape != Shape{n} || c.tensor(p).dtype != w.dtype))
      fail(c, absl::StrCat("per_sample_weights ", dtype_name(c.tensor(p).dtype), shape_str(c.tensor(p).shape),
                           " with mode ", mode, "; accepted: [", n, "] of the weight's dtype, with mode 0 (sum)"));
    const DType it = c.tensor(1).dtype;
    const int64_t o2b = kernels::embedding_bag_offset2bag_is_empty(w.dtype, mode, c.get_int("padding_idx")) ? 0 : n;
    return std::vector<TensorMeta>{{{bags, w.shape[1]}, w.dtype}, {{o2b}, it}, {{bags}, it},
                                   {mode == 2 ? Shape{bags, w.shape[1]} : Shape{bags}, it}};
  };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const int64_t v = c.tensor(0).shape[0];
    int64_t start = 0, end = v;
    if (!ctx.single_device()) {
      auto [shape, offset] = ctx.in_block(c, 0);
      start = offset[0];
      end = offset[0] + shape[0];
    }
    const int p = c.tensor_index("per_sample_weights");
    return guard(c, [&] {
      auto r = kernels::embedding_bag(in[0], in[1], in[2], c.get_int("mode"), p >= 0 ? in[p] : Tensor(),
                                      c.get_bool("include_last_offset"), c.get_int("padding_idx"), v, start, end);
      return std::vector<Tensor>(r.begin(), r.end());
    });
  };
  op.samples = [] {
    const std::vector<DType> types{DType::kFloat32, DType::kInt64, DType::kInt64, DType::kFloat32};
    return std::vector<Sample>{
        sample({{9, 4}, {7}, {3}}, {T(0), T(1), T(2)}, {{"mode", I(0)}}, types),
        sample({{9, 4}, {7}, {3}}, {T(0), T(1), T(2)}, {{"mode", I(1)}, {"padding_idx", I(3)}}, types),
        sample({{9, 4}, {7}, {4}}, {T(0), T(1), T(2)}, {{"mode", I(2)}, {"include_last_offset", V(true)}}, types),
        sample({{9, 4}, {7}, {3}, {7}}, {T(0), T(1), T(2)}, {{"mode", I(0)}, {"per_sample_weights", T(3)}}, types)};
  };
  // Indices in range; offsets 0, then increasing within [0, n] (the last one n with
  // include_last_offset, an empty bag included).
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 1) return index_input(c.tensor(1), c.tensor(0).shape[0], seed);
    if (i == 2) {
      const int64_t k = c.tensor(2).shape[0], n = c.tensor(1).shape[0];
      std::vector<int64_t> off(static_cast<size_t>(k), 0);
      for (int64_t j = 1; j < k; ++j) off[j] = std::min(n, off[j - 1] + (j == 1 ? 0 : static_cast<int64_t>((seed + j) % 4)));
      if (c.get_bool("include_last_offset") && k > 0) off[k - 1] = n;
      return Tensor::from_vector(off, {k}).to(c.tensor(2).dtype);
    }
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

}  // namespace

DTENSOR_FAMILY_PART("embedding", kDefinitions, define_embedding_bag);

}  // namespace dtensor::ops
