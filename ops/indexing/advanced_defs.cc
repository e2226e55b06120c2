// index.Tensor(self, indices) -> self[indices] and index_put(self, indices, values, accumulate) ->
// self with values written (or added) at self[indices]: ATen's advanced indexing (x[i],
// x[:, i, j], x[i] = v; index_put with accumulate is index's gradient). torch's semantics (the
// kernels, kernels/cpu/advanced_index.h): `indices` is a Tensor?[] with one entry per leading dim
// of self, None for a dim left alone; the index tensors are int64 or int32 and broadcast together;
// negative indices count from the end; the result layout follows torch's adjacency rule. A bool
// mask is refused here (its positions are data: the bridge expands it to its nonzero positions, as
// torch does, before calling these ops). The in-place index_put_ is the bridge's in-place form of
// index_put (torch_bridge._in_place), as for every ATen op with a trailing underscore.
//
// Both work on a block of self sharded along an indexed dim: index looks up the indices the block
// holds (zero elsewhere: a Partial(sum) piece), index_put writes only what lands in the block.
#include <algorithm>
#include <numeric>
#include <random>

#include "dtensor/partial_split.h"
#include "kernels/cpu/advanced_index.h"
#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// The index tensors' metas in dim order (nullopt for None), after checking their dtypes.
std::vector<std::optional<Shape>> index_shapes(const OpCall& c) {
  std::vector<std::optional<Shape>> out;
  const std::vector<int>& list = c.tensor_list("indices");
  for (size_t d = 0; d < list.size(); ++d) {
    if (list[d] < 0) {
      out.push_back(std::nullopt);
      continue;
    }
    const DType t = c.tensor(list[d]).dtype;
    if (t == DType::kBool)
      fail(c, absl::StrCat("index ", d, " is a ", dtype_name(t),
                           " mask; accepted: int64 or int32 indices (a mask's positions are data: expand it "
                           "with nonzero first, as torch does; the bridge does so)"));
    check_index(c, list[d], "index");
    out.push_back(c.tensor(list[d]).shape);
  }
  return out;
}

kernels::AdvancedIndexLayout layout_of(const OpCall& c) {
  const auto shapes = index_shapes(c);
  return guard(c, [&] { return kernels::advanced_index_layout(c.name().c_str(), c.tensor(0).shape, shapes); });
}

// The kernels' index list: this rank's index tensors in dim order, undefined for None.
std::vector<Tensor> index_list(const std::vector<Tensor>& in, const OpCall& c) {
  std::vector<Tensor> out;
  for (int t : c.tensor_list("indices")) out.push_back(t < 0 ? Tensor() : in[t]);
  return out;
}

// Sample inputs: index tensors with values in [-n, n) for their dim of size n (negative ones count
// from the end); for index_put without accumulate, the first index tensor distinct (a permutation,
// so no element is written twice: torch leaves the winner unspecified and a finite difference of
// an overwritten value is 0 where torch's gradient is not); values and self random.
Tensor index_sample_input(int i, const OpCall& c, uint64_t seed) {
  const std::vector<int>& list = c.tensor_list("indices");
  const auto it = std::find(list.begin(), list.end(), i);
  if (it == list.end()) return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  const int64_t n = c.tensor(0).shape[it - list.begin()];
  const int64_t count = numel(c.tensor(i).shape);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(count));
  const bool first = std::find_if(list.begin(), it, [](int t) { return t >= 0; }) == it;
  const bool distinct = first && c.op().schema.index_of("accumulate") >= 0 && !c.get_bool("accumulate");
  if (distinct) {
    if (count > n) fail(c, absl::StrCat("a sample with ", count, " distinct indices in a dim of size ", n));
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy(perm.begin(), perm.begin() + count, v.begin());
  } else {
    for (int64_t& x : v) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
  }
  for (int64_t& x : v)
    if (rng() % 2 == 0) x -= n;  // the same element, counted from the end
  std::vector<double> d(v.begin(), v.end());
  return Tensor::from_vector(d, c.tensor(i).shape).to(c.tensor(i).dtype);
}

// A Tensor?[] argument of the samples: entry k is tensor input list[k] (-1: None).
ArgValue Ts(std::vector<int> list) { return TensorListRef{std::move(list)}; }

void define_index(Registry& reg) {
  OpDef& op = reg.define("index.Tensor(Tensor self, Tensor?[] indices) -> Tensor", "indexing");
  op.cost = cost(CostClass::kCopy, Keeps::kNothing);
  op.aten.layout_dependent = true;  // a block of self along an indexed dim reads only the indices it holds
  op.meta = [](const OpCall& c) {
    return std::vector<TensorMeta>{{layout_of(c).result, c.tensor(0).dtype}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return one(kernels::index(in[0], index_list(in, c), ctx.in_block(c, 0).second, c.tensor(0).shape));
  }, {0});
  op.samples = [] {
    const DType f = DType::kFloat32, i64 = DType::kInt64, i32 = DType::kInt32;
    // Each dim left alone lands on another result dim (dim 1 -> 2, dim 3 -> 2, dim 1 -> 2), so a
    // rule that keeps a Shard's dim fails.
    return std::vector<Sample>{
        sample({{6, 5}, {2, 3}}, {T(0), Ts({1})}, {}, {f, i64}),                              // x[i], i 2-d
        sample({{4, 6, 3, 2}, {3}, {3}}, {T(0), Ts({-1, 1, 2})}, {}, {f, i64, i32}),         // x[:, i, j]: in place
        sample({{5, 3, 6}, {2, 2}, {2}}, {T(0), Ts({1, -1, 2})}, {}, {f, i64, i64}),         // x[i, :, j]: B first
        sample({{4, 7}, {3, 2}}, {T(0), Ts({-1, 1})}, {}, {f, i64})};                        // x[:, i], i 2-d
  };
  op.make_input = index_sample_input;
}

void define_index_put(Registry& reg) {
  OpDef& op = reg.define("index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
                         "indexing");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  op.aten.layout_dependent = true;  // a block of self along an indexed dim writes only what lands in it
  op.meta = [](const OpCall& c) {
    const kernels::AdvancedIndexLayout l = layout_of(c);
    const int v = c.num_tensors() - 1;  // values: the last tensor input
    const TensorMeta& values = c.tensor(v);
    if (values.dtype != c.tensor(0).dtype)
      fail(c, absl::StrCat("values have dtype ", dtype_name(values.dtype), ", self ", dtype_name(c.tensor(0).dtype),
                           "; accepted: the same dtype"));
    bool fits = values.shape.size() <= l.result.size();
    for (size_t k = 0; fits && k < values.shape.size(); ++k) {
      const int64_t want = l.result[l.result.size() - values.shape.size() + k];
      fits = values.shape[k] == want || values.shape[k] == 1;
    }
    if (!fits)
      fail(c, absl::StrCat("values ", shape_str(values.shape), " do not broadcast to self[indices] ",
                           shape_str(l.result), "; accepted: sizes equal or 1, from the right"));
    return std::vector<TensorMeta>{c.tensor(0)};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return one(kernels::index_put(in[0], index_list(in, c), in.back(), c.get_bool("accumulate"),
                                  ctx.out_block(0).second, c.tensor(0).shape));
  }, {0});  // the result is made of self: a rank with no values still returns its piece
  op.samples = [] {
    const DType f = DType::kFloat32, i64 = DType::kInt64, i32 = DType::kInt32;
    const auto acc = [](bool a) { return std::vector<std::pair<std::string, ArgValue>>{{"accumulate", V(a)}}; };
    return std::vector<Sample>{
        sample({{6, 5}, {4}, {4, 5}}, {T(0), Ts({1}), T(2)}, acc(false), {f, i64, f}),          // x[i] = v
        sample({{6, 5}, {7}, {5}}, {T(0), Ts({1}), T(2)}, acc(true), {f, i64, f}),              // repeated, broadcast
        sample({{4, 6, 3}, {2, 3}, {3}, {4, 2, 3}}, {T(0), Ts({-1, 1, 2}), T(3)}, acc(true), {f, i64, i32, f}),
        sample({{5, 3, 6}, {2, 2}, {2}, {2, 2, 3}}, {T(0), Ts({1, -1, 2}), T(3)}, acc(false), {f, i64, i64, f}),
        sample({{4, 7}, {3, 2}, {3, 1}}, {T(0), Ts({-1, 1}), T(2)}, acc(true), {f, i64, f})};
  };
  op.make_input = index_sample_input;
}

void define_advanced_indexing_ops(Registry& reg) {
  define_index(reg);
  define_index_put(reg);
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kDefinitions, define_advanced_indexing_ops);

}  // namespace dtensor::ops
