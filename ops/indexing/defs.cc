// index_select(self, dim, index) -> self's slices at `index` along dim; index_select_backward, its
// gradient; index_add(self, dim, index, source, alpha) -> self with alpha * source's slices added at
// `index` along dim (what torch's autograd emits for index_select's gradient). torch's semantics:
// index 0-d or 1-d, int64 or int32, every value in [0, self.size(dim)); a 0-d self takes dim 0 or
// -1. All three work on a block of self sharded along dim: the lookup keeps the indices that block
// holds (zero elsewhere, a Partial(sum) piece), the others produce the rows of their output block.
// The kernels are the embedding ones over self seen as [size(dim), rest] (ops/embedding), so a
// device runs them as well; they check the index range, except the masked lookup (check_range).
// gather(self, dim, index), scatter_add(self, dim, index, src) and scatter.src / scatter.value
// (torch's semantics: index int64 or int32 with self's rank) run kernels/cpu/gather_scatter.h, which
// handles a block of self along dim (gather: a Partial(sum) piece of the indices it holds; the
// scatters: what lands in it) and checks every index against the whole dim; gather and scatter_add
// have CUDA kernels, scatter runs on the host.
#include <algorithm>
#include <numeric>
#include <random>

#include "kernels/cpu/backward.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gather_scatter.h"
#include "kernels/cpu/reduction.h"

#include "dtensor/core/limits.h"
#include "dtensor/partial_split.h"
#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// Fails naming the call unless `index` is 0-d or 1-d, int64 or int32.
void check_index_arg(const OpCall& c, int t) {
  check_index(c, t, "index");
  if (c.tensor(t).shape.size() > 1)
    fail(c, absl::StrCat("index must be 0-d or 1-d, got ", c.tensor(t).shape.size(), " dims"));
}

// Every index in [0, n), for the paths whose kernel does not check it: the masked lookup of a block
// cannot tell a wrong index from one another block holds.
void check_range(const OpCall& c, const Tensor& index, int64_t n) {
  if (index.numel() == 0) return;
  const double lo = kernels::amin(index, {}, false).to(cpu()).item();
  const double hi = kernels::amax(index, {}, false).to(cpu()).item();
  if (lo < 0 || hi >= static_cast<double>(n))
    fail(c, absl::StrCat("index ", lo < 0 ? lo : hi, " is out of range for a dim of size ", n,
                         "; accepted: indices in [0, ", n, ")"));
}

// x [..., s, ...] (dim d) as [s, rest]: the layout the embedding kernels take.
Tensor rows_first(const Tensor& x, int64_t d) {
  const int64_t s = x.size(d);
  int64_t rest = 1;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != d) rest *= x.size(i);
  return x.movedim(d, 0).contiguous().reshape({s, rest});
}

// The inverse: rows [k, rest] back to `shape` with dim d of size k.
Tensor rows_back(const Tensor& rows, Shape shape, int64_t d) {
  const int64_t k = rows.size(0);
  shape.erase(shape.begin() + d);
  shape.insert(shape.begin(), k);
  return rows.reshape(shape).movedim(0, d).contiguous();
}

// Sample inputs of the ops whose input 1 indexes self (input 0) along dim: that index with values
// in [0, self.size(dim)) (one value for a 0-d self), the others random.
Tensor index_into_self(int i, const OpCall& c, uint64_t seed) {
  const Shape& s = c.tensor(0).shape;
  if (i == 1) return index_input(c.tensor(1), s.empty() ? 1 : s[dim_arg(c, static_cast<int64_t>(s.size()))], seed);
  return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
}

void define_index_select(Registry& reg) {
  OpDef& op = reg.define("index_select(Tensor self, int dim, Tensor index) -> Tensor", "indexing");
  op.cost = cost(CostClass::kCopy, Keeps::kNothing);
  op.aten.layout_dependent = true;  // a block of self along dim looks up the indices it holds
  op.meta = [](const OpCall& c) {
    check_index_arg(c, 1);
    Shape out = c.tensor(0).shape;
    const int64_t d = dim_arg(c, static_cast<int64_t>(out.size()));
    const int64_t k = numel(c.tensor(1).shape);
    if (out.empty()) {
      if (k != 1) fail(c, absl::StrCat("a 0-d self takes one index, got ", k));
    } else {
      out[d] = k;
    }
    return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
  };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const Shape& global = c.tensor(0).shape;
    const Tensor index = in[1].reshape({in[1].numel()});
    if (global.empty()) {
      check_range(c, index, 1);
      return one(in[0].reshape({1}).clone().reshape({}));
    }
    const int64_t d = dim_arg(c, static_cast<int64_t>(global.size()));
    auto [shape, offset] = ctx.in_block(c, 0);
    if (shape[d] == global[d]) return one(guard(c, [&] { return kernels::index_select(in[0], d, index); }));
    check_range(c, index, global[d]);
    Shape out = shape;
    out[d] = index.numel();
    if (shape[d] == 0) return one(Tensor::zeros(out, in[0].dtype(), in[0].device()));
    const Tensor rows = kernels::embedding_masked(rows_first(in[0], d), index, offset[d], offset[d] + shape[d]);
    return one(rows_back(rows, shape, d));
  };
  op.samples = [] {
    return std::vector<Sample>{
        sample({{7, 5}, {4}}, {T(0), I(0), T(1)}, {}, {DType::kFloat32, DType::kInt64}),
        sample({{4, 9, 3}, {6}}, {T(0), I(1), T(1)}, {}, {DType::kFloat32, DType::kInt32}),
        sample({{5, 6}, {}}, {T(0), I(-1), T(1)}, {}, {DType::kFloat32, DType::kInt64})};
  };
  op.make_input = index_into_self;
}

void define_index_select_backward(Registry& reg) {
  OpDef& op = reg.define(
      "index_select_backward(Tensor grad, int[] self_sizes, int dim, Tensor index) -> Tensor", "indexing");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  op.aten.layout_dependent = true;  // an output block along dim holds only its rows
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad");
    check_index_arg(c, 1);
    const std::vector<int64_t> sizes = c.get_int_list("self_sizes");
    int64_t n = 1;
    for (int64_t s : sizes) {
      if (s < 0) fail(c, absl::StrCat("self_sizes must be >= 0, got ", s));
      n = guard(c, [&] { return checked_mul(n, s, "self_sizes element count"); });
    }
    Shape want(sizes.begin(), sizes.end());
    if (!want.empty()) want[dim_arg(c, static_cast<int64_t>(want.size()))] = numel(c.tensor(1).shape);
    check_shape(c, 0, "grad (self_sizes with index's length at dim)", want);
    return std::vector<TensorMeta>{{Shape(sizes.begin(), sizes.end()), c.tensor(0).dtype}};
  };
  // Rows [offset, offset + rows) along dim of the result: all of them, or this rank's block.
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const std::vector<int64_t> sizes = c.get_int_list("self_sizes");
    const Tensor index = in[1].reshape({in[1].numel()});
    if (sizes.empty()) {
      check_range(c, index, 1);
      return one(in[0].reshape({}).clone());
    }
    const int64_t d = dim_arg(c, static_cast<int64_t>(sizes.size()));
    auto [shape, offset] = ctx.out_block(0);
    const Tensor rows = kernels::embedding_dense_backward(rows_first(in[0], d), index, sizes[d], -1, offset[d], shape[d]);
    return one(rows_back(rows, shape, d));
  });
  op.samples = [] {
    return std::vector<Sample>{
        sample({{4, 5}, {4}}, {T(0), L({7, 5}), I(0), T(1)}, {}, {DType::kFloat32, DType::kInt64}),
        sample({{4, 6, 3}, {6}}, {T(0), L({4, 9, 3}), I(1), T(1)}, {}, {DType::kFloat32, DType::kInt32})};
  };
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    const std::vector<int64_t> s = c.get_int_list("self_sizes");
    if (i == 1) return index_input(c.tensor(1), s[dim_arg(c, static_cast<int64_t>(s.size()))], seed);
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

void define_index_add(Registry& reg) {
  OpDef& op = reg.define(
      "index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor", "indexing");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  op.aten.layout_dependent = true;  // a block of self along dim adds only its rows
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "self");
    check_index_arg(c, 1);
    if (c.tensor(2).dtype != c.tensor(0).dtype)
      fail(c, absl::StrCat("source has dtype ", dtype_name(c.tensor(2).dtype), ", self ",
                           dtype_name(c.tensor(0).dtype), "; accepted: the same dtype"));
    Shape want = c.tensor(0).shape;
    const int64_t k = numel(c.tensor(1).shape);
    if (!want.empty()) want[dim_arg(c, static_cast<int64_t>(want.size()))] = k;
    else if (k != 1) fail(c, absl::StrCat("a 0-d self takes one index, got ", k));
    check_shape(c, 2, "source (self's shape with index's length at dim)", want);
    return std::vector<TensorMeta>{c.tensor(0)};
  };
  // Rows [offset, offset + rows) along dim: all of them, or this rank's block of self.
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const Shape& global = c.tensor(0).shape;
    const Tensor index = in[1].reshape({in[1].numel()});
    const bool scalar = global.empty();
    const int64_t d = dim_arg(c, static_cast<int64_t>(global.size()));
    auto [shape, offset] = ctx.out_block(0);
    if (scalar) {
      shape = {1};
      offset = {0};
    }
    const Tensor source = scalar ? in[2].reshape({1}) : in[2];
    const Tensor rows = kernels::embedding_dense_backward(rows_first(source, d), index, scalar ? 1 : global[d], -1,
                                                          offset[d], shape[d]);
    Tensor added = rows_back(rows, shape, d);
    if (scalar) added = added.reshape({});
    const double alpha = c.get_double("alpha");
    if (alpha != 1) added = kernels::mul(added, kernels::Scalar(alpha));
    return one(kernels::add(in[0], added, 1));
  });
  op.samples = [] {
    return std::vector<Sample>{
        sample({{7, 5}, {4}, {4, 5}}, {T(0), I(0), T(1), T(2)}, {}, {DType::kFloat32, DType::kInt64, DType::kFloat32}),
        sample({{4, 9, 3}, {6}, {4, 6, 3}}, {T(0), I(1), T(1), T(2)}, {{"alpha", V(IValue(-2.0))}},
               {DType::kFloat32, DType::kInt32, DType::kFloat32})};
  };
  op.make_input = index_into_self;
}

// gather / scatter_add: index (int64 or int32) has self's rank; index.size(d) <= self.size(d) for d != dim (and
// <= src.size(d) for every d); the kernels check the values.
void check_gather_index(const OpCall& c, int t) {
  check_index(c, t, "index");
  const Shape& self = c.tensor(0).shape;
  const Shape& index = c.tensor(t).shape;
  if (self.empty() ? index.size() > 1 || numel(index) > 1 : index.size() != self.size())
    fail(c, absl::StrCat("index ", shape_str(index), " for self ", shape_str(self),
                         "; accepted: as many dims as self"));
  if (self.empty()) return;
  const int64_t d = dim_arg(c, static_cast<int64_t>(self.size()));
  for (size_t i = 0; i < self.size(); ++i)
    if (static_cast<int64_t>(i) != d && index[i] > self[i])
      fail(c, absl::StrCat("index ", shape_str(index), " is larger than self ", shape_str(self), " at dim ", i,
                           "; accepted: index.size(d) <= self.size(d) for d != dim"));
}

void define_gather(Registry& reg) {
  OpDef& op = reg.define("gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor", "indexing");
  op.cost = cost(CostClass::kCopy, Keeps::kNothing);
  op.aten.layout_dependent = true;  // a block of self along dim reads only the indices it holds
  op.meta = [](const OpCall& c) {
    check_gather_index(c, 1);
    return std::vector<TensorMeta>{{c.tensor(1).shape, c.tensor(0).dtype}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const Shape& global = c.tensor(0).shape;
    if (global.empty()) return one(kernels::gather(in[0], 0, in[1]));
    const int64_t d = dim_arg(c, static_cast<int64_t>(global.size()));
    const int64_t offset = ctx.in_block(c, 0).second[d];
    return one(kernels::gather(in[0], d, in[1], offset, global[d]));
  });
  op.samples = [] {
    const std::vector<DType> f_i = {DType::kFloat32, DType::kInt64};
    return std::vector<Sample>{sample({{7, 5}, {4, 5}}, {T(0), I(0), T(1)}, {}, f_i),
                               sample({{4, 9, 3}, {4, 6, 2}}, {T(0), I(1), T(1)}, {}, f_i),
                               sample({{5, 6}, {5, 9}}, {T(0), I(-1), T(1)}, {}, f_i)};
  };
  op.make_input = index_into_self;
}

// scatter_add / scatter.src: index as gather's; src (self's dtype and rank) at least index's size.
std::vector<TensorMeta> scatter_meta(const OpCall& c) {
  check_gather_index(c, 1);
  if (c.tensor(2).dtype != c.tensor(0).dtype)
    fail(c, absl::StrCat("src has dtype ", dtype_name(c.tensor(2).dtype), ", self ", dtype_name(c.tensor(0).dtype),
                         "; accepted: the same dtype"));
  const Shape& index = c.tensor(1).shape;
  const Shape& src = c.tensor(2).shape;
  const bool scalar_src = c.tensor(0).shape.empty() && src.size() <= 1 && numel(src) <= 1;
  if (src.size() != c.tensor(0).shape.size() && !scalar_src)
    fail(c, absl::StrCat("src ", shape_str(src), " for self ", shape_str(c.tensor(0).shape),
                         "; accepted: as many dims as self"));
  for (size_t i = 0; i < index.size() && i < src.size(); ++i)
    if (index[i] > src[i])
      fail(c, absl::StrCat("index ", shape_str(index), " is larger than src ", shape_str(src), " at dim ", i,
                           "; accepted: index.size(d) <= src.size(d)"));
  return std::vector<TensorMeta>{c.tensor(0)};
}

// The samples of scatter_add and scatter.src: index along dim 0, 1 and -1, src larger than index in one.
std::vector<Sample> scatter_samples() {
  const std::vector<DType> f_i_f = {DType::kFloat32, DType::kInt64, DType::kFloat32};
  return {sample({{7, 5}, {4, 5}, {4, 5}}, {T(0), I(0), T(1), T(2)}, {}, f_i_f),
          sample({{4, 9, 3}, {4, 6, 3}, {4, 6, 3}}, {T(0), I(1), T(1), T(2)}, {}, f_i_f),
          sample({{5, 6}, {5, 9}, {5, 9}}, {T(0), I(-1), T(1), T(2)}, {}, f_i_f)};
}

void define_scatter_add(Registry& reg) {
  OpDef& op = reg.define("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor", "indexing");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  op.aten.layout_dependent = true;  // a block of self along dim adds only what lands in it
  op.meta = scatter_meta;
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const Shape& global = c.tensor(0).shape;
    if (global.empty()) return one(kernels::scatter_add(in[0], 0, in[1], in[2]));
    const int64_t d = dim_arg(c, static_cast<int64_t>(global.size()));
    const int64_t offset = ctx.out_block(0).second[d];
    return one(kernels::scatter_add(in[0], d, in[1], in[2], offset, global[d]));
  }, {0});  // the result is made of self: a rank with no index or src rows still returns its piece
  op.samples = scatter_samples;
  op.make_input = index_into_self;
}

// Sample inputs of scatter: an index whose values are distinct along dim within each column (torch
// leaves duplicates' winner unspecified and its src gradient counts overwritten elements), the
// others random.
Tensor distinct_index_into_self(int i, const OpCall& c, uint64_t seed) {
  if (i != 1) return index_into_self(i, c, seed);
  const Shape& self = c.tensor(0).shape;
  const Shape& index = c.tensor(1).shape;
  if (self.empty()) return index_into_self(i, c, seed);
  const int64_t d = dim_arg(c, static_cast<int64_t>(self.size())), n = self[d], len = index[d];
  if (len > n) fail(c, absl::StrCat("a sample with ", len, " distinct indices in a dim of size ", n));
  int64_t inner = 1;
  for (size_t k = d + 1; k < index.size(); ++k) inner *= index[k];
  const int64_t columns = len == 0 ? 0 : numel(index) / len;
  std::vector<double> v(numel(index));
  std::mt19937_64 rng(seed);
  std::vector<int64_t> perm(n);
  for (int64_t col = 0; col < columns; ++col) {
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t first = (col / inner) * len * inner + col % inner;
    for (int64_t j = 0; j < len; ++j) v[first + j * inner] = static_cast<double>(perm[j]);
  }
  return Tensor::from_vector(v, index).to(c.tensor(1).dtype);
}

// scatter.src / scatter.value: self with src's elements (or the value) written at the indices; a
// block of self along dim writes only what lands in it (the kernel of scatter_add's layout).
void define_scatter(Registry& reg) {
  for (bool value : {false, true}) {
    OpDef& op = reg.define(value ? "scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor"
                                 : "scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
                           "indexing");
    op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
    op.aten.layout_dependent = true;
    op.meta = value ? MetaFn([](const OpCall& c) {
      check_gather_index(c, 1);
      return std::vector<TensorMeta>{c.tensor(0)};
    })
                    : MetaFn(scatter_meta);
    op.kernel = guarded([value](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
      const Tensor src =
          value ? Tensor::full(in[1].sizes(), c.get_double("value"), in[0].dtype(), in[0].device()) : in[2];
      const Shape& global = c.tensor(0).shape;
      if (global.empty()) return one(kernels::scatter(in[0], 0, in[1], src));
      const int64_t d = dim_arg(c, static_cast<int64_t>(global.size()));
      return one(kernels::scatter(in[0], d, in[1], src, ctx.out_block(0).second[d], global[d]));
    }, {0});
    op.samples = [value] {
      const std::vector<DType> f_i_f = {DType::kFloat32, DType::kInt64, DType::kFloat32};
      const std::vector<DType> f_i(f_i_f.begin(), f_i_f.begin() + 2);
      if (value)
        return std::vector<Sample>{sample({{7, 5}, {4, 5}}, {T(0), I(0), T(1), V(2.5)}, {}, f_i),
                                   sample({{5, 6}, {5, 4}}, {T(0), I(-1), T(1), I(-3)}, {}, f_i)};
      return std::vector<Sample>{sample({{7, 5}, {4, 5}, {4, 5}}, {T(0), I(0), T(1), T(2)}, {}, f_i_f),
                                 sample({{4, 9, 3}, {4, 6, 3}, {4, 6, 3}}, {T(0), I(1), T(1), T(2)}, {}, f_i_f),
                                 sample({{5, 6}, {5, 4}, {5, 4}}, {T(0), I(-1), T(1), T(2)}, {}, f_i_f)};
    };
    op.make_input = distinct_index_into_self;
  }
}

// scatter_reduce.two: scatter.src's layout and checks; reduce and include_self as torch's.
void define_scatter_reduce(Registry& reg) {
  OpDef& op = reg.define(
      "scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor",
      "indexing");
  op.cost = cost(CostClass::kOnePass, Keeps::kInputsAndOutput);
  op.aten.layout_dependent = true;
  op.meta = [](const OpCall& c) {
    const std::string r = c.get_str("reduce");
    if (r != "sum" && r != "prod" && r != "mean" && r != "amax" && r != "amin")
      fail(c, absl::StrCat("reduce '", r, "'; accepted: sum, prod, mean, amax, amin"));
    return scatter_meta(c);
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const std::string r = c.get_str("reduce");
    const bool inc = c.get_bool("include_self");
    const Shape& global = c.tensor(0).shape;
    if (global.empty()) return one(kernels::scatter_reduce(in[0], 0, in[1], in[2], r, inc));
    const int64_t d = dim_arg(c, static_cast<int64_t>(global.size()));
    return one(kernels::scatter_reduce(in[0], d, in[1], in[2], r, inc, ctx.out_block(0).second[d], global[d]));
  }, {0});
  // sum and mean (the reduces with a backward here); amax, amin and prod are compared with torch by
  // the OpInfo oracle (tests/python/opinfo_oracle.py).
  op.samples = [] {
    const std::vector<DType> f_i_f = {DType::kFloat32, DType::kInt64, DType::kFloat32};
    auto s = [&](const char* r, bool inc, Shape a, Shape b, int64_t dim) {
      return sample({a, b, b}, {T(0), I(dim), T(1), T(2), V(std::string(r))}, {{"include_self", V(inc)}}, f_i_f);
    };
    return std::vector<Sample>{s("sum", true, {7, 5}, {9, 5}, 0), s("sum", false, {4, 9, 3}, {4, 6, 3}, 1),
                               s("mean", true, {5, 6}, {5, 9}, -1), s("mean", false, {7, 5}, {9, 5}, 0)};
  };
  op.make_input = index_into_self;
}

void define_indexing_ops(Registry& reg) {
  define_index_select(reg);
  define_index_select_backward(reg);
  define_index_add(reg);
  define_gather(reg);
  define_scatter_add(reg);
  define_scatter(reg);
  define_scatter_reduce(reg);
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kDefinitions, define_indexing_ops);

}  // namespace dtensor::ops
