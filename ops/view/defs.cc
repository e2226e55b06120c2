// View and shape ops. Ops that take a target shape (view, reshape, flatten, squeeze, unsqueeze,
// expand) compute the global output shape in meta and, locally, produce this rank's output block
// shape (the strategies only allow layouts whose blocks line up).
#include "ops/common/backward_defs.h"
#include "ops/common/defs.h"
#include "ops/family.h"
#include "ops/view/view_op.h"

namespace dtensor::ops {
namespace {

int64_t rank0(const OpCall& c) { return static_cast<int64_t>(c.tensor(0).shape.size()); }

Shape infer(const OpCall& c, std::vector<int64_t> req) {
  const int64_t n = numel(c.tensor(0).shape);
  int64_t known = 1, at = -1;
  for (size_t i = 0; i < req.size(); ++i) {
    if (req[i] == -1) {
      if (at >= 0) fail(c, "only one dim may be -1");
      at = static_cast<int64_t>(i);
    } else if (req[i] < 0) {
      fail(c, absl::StrCat("invalid size ", req[i]));
    } else {
      known *= req[i];
    }
  }
  if (at >= 0) {
    if (known == 0 || n % known != 0) fail(c, absl::StrCat("shape [", absl::StrJoin(req, ", "), "] is invalid for ", n, " elements"));
    req[at] = n / known;
  }
  Shape out(req.begin(), req.end());
  if (numel(out) != n)
    fail(c, absl::StrCat("shape ", shape_str(out), " is invalid for input of ", n, " elements"));
  return out;
}

// An op whose output is input 0 reshaped to a shape computed from the call.
OpDef& reshaping(Registry& reg, const std::string& schema, std::function<Shape(const OpCall&)> shape_fn,
                 SampleFn samples) {
  OpDef& op = reg.define(schema, "view");
  op.cost = cost(CostClass::kView, Keeps::kNothing);
  op.meta = [shape_fn](const OpCall& c) { return std::vector<TensorMeta>{{shape_fn(c), c.tensor(0).dtype}}; };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall&, const LocalContext& ctx) {
    return one(in[0].reshape(ctx.out_block(0).first));
  };
  op.samples = std::move(samples);
  return op;
}

Shape permuted(const Shape& s, const std::vector<int64_t>& order) {
  Shape out;
  for (int64_t d : order) out.push_back(s[d]);
  return out;
}

// diagonal's dims (d1, d2, wrapped and distinct) and length, with ATen's checks.
struct Diagonal {
  int64_t d1 = 0, d2 = 1, length = 0;
};

Diagonal diagonal_of(const OpCall& c, const Shape& s) {
  const int64_t rank = static_cast<int64_t>(s.size());
  if (rank < 2) fail(c, absl::StrCat("input ", shape_str(s), ": accepted: at least 2 dims"));
  Diagonal g;
  g.d1 = guard(c, [&] { return wrap_dim(c.get_int("dim1"), rank, "dim1"); });
  g.d2 = guard(c, [&] { return wrap_dim(c.get_int("dim2"), rank, "dim2"); });
  if (g.d1 == g.d2) fail(c, absl::StrCat("dim1 and dim2 are both ", g.d1, "; accepted: two different dims"));
  const int64_t off = c.get_int("offset"), n1 = s[g.d1], n2 = s[g.d2];
  g.length = std::max<int64_t>(0, off >= 0 ? std::min(n1, n2 - off) : std::min(n1 + off, n2));
  return g;
}

// The dims diagonal keeps, in order, then the diagonal's: its output shape.
Shape diagonal_shape(const Shape& s, const Diagonal& g) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    if (d != g.d1 && d != g.d2) out.push_back(s[d]);
  out.push_back(g.length);
  return out;
}

// The diagonal view of t (offset above dim1-dim2's main diagonal, below when negative).
Tensor diagonal_view(const Tensor& t, int64_t offset, int64_t d1, int64_t d2, int64_t length) {
  Shape sizes, strides;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d != d1 && d != d2) sizes.push_back(t.size(d)), strides.push_back(t.stride(d));
  sizes.push_back(length);
  strides.push_back(t.stride(d1) + t.stride(d2));
  const int64_t start = length == 0 ? 0 : offset >= 0 ? offset * t.stride(d2) : -offset * t.stride(d1);
  return Tensor::from_storage(t.storage(), t.storage_offset() + start, sizes, strides, t.dtype());
}

// diagonal_backward(grad_output, input_sizes, offset, dim1, dim2), ATen's op that torch's autograd
// calls: zeros of input_sizes with grad_output on the diagonal (defined here beside diagonal, whose
// helpers it shares). input_sizes are global: a rank fills its output block, the rules keeping
// dim1 and dim2 whole.
void define_diagonal_backward(Registry& reg) {
  OpDef& op = reg.define(
      "diagonal_backward(Tensor grad_output, int[] input_sizes, int offset, int dim1, int dim2) -> Tensor", "view");
  op.cost = cost(CostClass::kCopy, Keeps::kNothing);
  op.aten.layout_dependent = true;  // input_sizes are global: a grad block fills its block of them
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    Shape sizes;
    for (int64_t v : c.get_int_list("input_sizes")) {
      if (v < 0) fail(c, absl::StrCat("input_sizes has a negative size ", v));
      sizes.push_back(v);
    }
    guard(c, [&] { return numel(sizes); });  // the element count must fit int64
    check_shape(c, 0, "grad_output (the diagonal of input_sizes)", diagonal_shape(sizes, diagonal_of(c, sizes)));
    return std::vector<TensorMeta>{{sizes, c.tensor(0).dtype}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const Shape block = ctx.out_block(0).first;
    Tensor out = Tensor::zeros(block, in[0].dtype(), in[0].device());
    const Diagonal g = diagonal_of(c, block);
    Tensor diag = diagonal_view(out, c.get_int("offset"), g.d1, g.d2, g.length);
    if (diag.numel() > 0) diag.copy_(in[0]);
    return one(out);
  });
  op.samples = [] {
    return std::vector<Sample>{sample({{4}}, {T(0), L({5, 4}), I(0), I(0), I(1)}),
                               sample({{6, 3}}, {T(0), L({3, 6, 5}), I(-1), I(2), I(0)})};
  };
}

}  // namespace

void define_view_ops(Registry& reg) {
  define_diagonal_backward(reg);
  auto view_shape = [](const OpCall& c) { return infer(c, c.get_int_list("size")); };
  // ATen's view and _unsafe_view get the block's shape on a block, and run as reshape there: the
  // bridge's tensors claim contiguous global strides, so torch calls view where a block (after a
  // transpose) may not be viewable.
  reshaping(reg, "view(Tensor self, int[] size) -> Tensor", view_shape, [] {
    return std::vector<Sample>{sample({{6, 4}}, {T(0), L({3, 2, 4})}), sample({{4, 3, 5}}, {T(0), L({12, -1})}),
                               sample({{8, 6}}, {T(0), L({8, 2, 3})})};
  }).aten.aliases = {{"view", "", true, "reshape"}, {"_unsafe_view", "", true, "reshape"}};
  OpDef& reshape = reshaping(reg, "reshape(Tensor self, int[] shape) -> Tensor",
            [](const OpCall& c) { return infer(c, c.get_int_list("shape")); },
            [] { return std::vector<Sample>{sample({{6, 4}}, {T(0), L({2, 12})}), sample({{5, 3}}, {T(0), L({15})})}; });
  reshape.aten.aliases = {{"reshape", "", true, ""}};
  reshaping(reg, "flatten(Tensor self, int start_dim=0, int end_dim=-1) -> Tensor",
            [](const OpCall& c) {
              const Shape& s = c.tensor(0).shape;
              if (s.empty()) return Shape{1};
              int64_t a = guard(c, [&] { return wrap_dim(c.get_int("start_dim"), rank0(c), "start_dim"); });
              int64_t b = guard(c, [&] { return wrap_dim(c.get_int("end_dim"), rank0(c), "end_dim"); });
              if (a > b) fail(c, "start_dim must not come after end_dim");
              Shape out(s.begin(), s.begin() + a);
              int64_t m = 1;
              for (int64_t d = a; d <= b; ++d) m *= s[d];
              out.push_back(m);
              out.insert(out.end(), s.begin() + b + 1, s.end());
              return out;
            },
            [] { return std::vector<Sample>{sample({{4, 3, 5}}, {T(0), I(1)}), sample({{6, 2, 3}}, {T(0)})}; });
  // Which dims it drops depends on the global shape (a block of an uneven shard may be 1 long where
  // the tensor is not): ATen's squeeze on a block would drop it.
  OpDef& squeeze = reshaping(reg, "squeeze(Tensor self, int[1]? dim=None) -> Tensor",
            [](const OpCall& c) {
              const Shape& s = c.tensor(0).shape;
              std::vector<bool> drop(s.size(), !c.has("dim"));
              for (int64_t d : c.get_int_list("dim")) {
                int64_t w = guard(c, [&] { return wrap_dim(d, rank0(c), "dim"); });
                if (!s.empty()) drop[w] = true;  // a 0-d tensor takes dim 0 or -1 and stays 0-d
              }
              Shape out;
              for (size_t d = 0; d < s.size(); ++d)
                if (!(drop[d] && s[d] == 1)) out.push_back(s[d]);
              return out;
            },
            [] { return std::vector<Sample>{sample({{5, 1, 4}}, {T(0), L({1})}), sample({{1, 6, 1}}, {T(0)})}; });
  squeeze.aten.layout_dependent = true;
  reshaping(reg, "unsqueeze(Tensor self, int dim) -> Tensor",
            [](const OpCall& c) {
              Shape s = c.tensor(0).shape;
              int64_t d = guard(c, [&] { return wrap_dim(c.get_int("dim"), rank0(c) + 1, "dim"); });
              s.insert(s.begin() + d, 1);
              return s;
            },
            [] { return std::vector<Sample>{sample({{5, 4}}, {T(0), I(1)}), sample({{6}}, {T(0), I(-1)})}; });
  define_view_op(reg, "transpose(Tensor self, int dim0, int dim1) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           int64_t a = guard(c, [&] { return wrap_dim(c.get_int("dim0"), rank0(c), "dim0"); });
           int64_t b = guard(c, [&] { return wrap_dim(c.get_int("dim1"), rank0(c), "dim1"); });
           Shape s = c.tensor(0).shape;
           if (!s.empty()) std::swap(s[a], s[b]);  // a 0-d tensor takes dims 0/-1 and stays as is
           return std::vector<TensorMeta>{{s, c.tensor(0).dtype}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           if (in[0].dim() == 0) return one(in[0]);
           return one(in[0].transpose(c.get_int("dim0"), c.get_int("dim1")));
         },
         [] { return std::vector<Sample>{sample({{5, 3, 4}}, {T(0), I(0), I(2)})}; });
  define_view_op(reg, "t(Tensor self) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           if (rank0(c) > 2) fail(c, "t expects a tensor with <= 2 dims; use transpose");
           Shape s = c.tensor(0).shape;
           if (s.size() == 2) std::swap(s[0], s[1]);
           return std::vector<TensorMeta>{{s, c.tensor(0).dtype}};
         },
         [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
           return one(in[0].dim() == 2 ? in[0].transpose(0, 1) : in[0]);
         },
         [] { return std::vector<Sample>{sample({{5, 7}}, {T(0)})}; });
  define_view_op(reg, "permute(Tensor self, int[] dims) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           std::vector<int64_t> dims = c.get_int_list("dims");
           if (static_cast<int64_t>(dims.size()) != rank0(c))
             fail(c, absl::StrCat("dims must list each of the ", rank0(c), " dims once"));
           std::vector<bool> seen(dims.size(), false);
           for (int64_t& d : dims) {
             d = guard(c, [&] { return wrap_dim(d, rank0(c), "dims"); });
             if (seen[d]) fail(c, absl::StrCat("dim ", d, " appears more than once in dims"));
             seen[d] = true;
           }
           return std::vector<TensorMeta>{{permuted(c.tensor(0).shape, dims), c.tensor(0).dtype}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(in[0].permute(c.get_int_list("dims")));
         },
         [] { return std::vector<Sample>{sample({{5, 3, 4}}, {T(0), L({2, 0, 1})})}; });
  // ATen's expand(self, size, implicit) gets the block's shape on a block.
  OpDef& expand = define_view_op(reg, "expand(Tensor self, int[] size) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           std::vector<int64_t> req = c.get_int_list("size");
           Shape want(req.begin(), req.end());
           const Shape& s = c.tensor(0).shape;
           if (want.size() < s.size()) fail(c, "size has fewer dims than the tensor");
           size_t lead = want.size() - s.size();
           for (size_t i = 0; i < want.size(); ++i) {
             if (i >= lead && want[i] == -1) want[i] = s[i - lead];
             if (i >= lead && s[i - lead] != 1 && s[i - lead] != want[i])
               fail(c, absl::StrCat("cannot expand ", shape_str(s), " to [", absl::StrJoin(req, ", "),
                                    "]: only size-1 dims expand"));
           }
           return std::vector<TensorMeta>{{want, c.tensor(0).dtype}};
         },
         [](const std::vector<Tensor>& in, const OpCall&, const LocalContext& ctx) {
           return one(in[0].expand(ctx.out_block(0).first));
         },
         [] { return std::vector<Sample>{sample({{5, 1}}, {T(0), L({3, 5, 4})})}; });
  expand.aten.aliases = {{"expand", "keep:2", true, ""}};
  define_view_op(reg, "cat(Tensor[] tensors, int dim=0) -> Tensor", CostClass::kCopy,
         [](const OpCall& c) {
           int64_t d = guard(c, [&] { return wrap_dim(c.get_int("dim"), rank0(c), "dim"); });
           Shape out = c.tensor(0).shape;
           out[d] = 0;
           for (int t = 0; t < c.num_tensors(); ++t) {
             Shape s = c.tensor(t).shape;
             if (s.size() != out.size() || c.tensor(t).dtype != c.tensor(0).dtype)
               fail(c, "tensors must share rank and dtype");
             for (size_t k = 0; k < s.size(); ++k)
               if (static_cast<int64_t>(k) != d && s[k] != out[k])
                 fail(c, absl::StrCat("sizes must match except in dim ", d));
             out[d] += s[d];
           }
           return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) { return one(cat(in, c.get_int("dim"))); },
         [] {
           Sample s;
           s.tensors = {{{4, 3}, DType::kFloat32}, {{4, 5}, DType::kFloat32}};
           s.positional = {TensorListRef{{0, 1}}, I(1)};
           return std::vector<Sample>{s};
         });
  define_view_op(reg, "stack(Tensor[] tensors, int dim=0) -> Tensor", CostClass::kCopy,
         [](const OpCall& c) {
           int64_t d = guard(c, [&] { return wrap_dim(c.get_int("dim"), rank0(c) + 1, "dim"); });
           for (int t = 1; t < c.num_tensors(); ++t)
             if (!(c.tensor(t) == c.tensor(0))) fail(c, "stack needs tensors of one shape and dtype");
           Shape out = c.tensor(0).shape;
           out.insert(out.begin() + d, c.num_tensors());
           return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(kernels::stack(in, c.get_int("dim")));
         },
         [] {
           Sample s;
           s.tensors = {{{5, 3}, DType::kFloat32}, {{5, 3}, DType::kFloat32}, {{5, 3}, DType::kFloat32}};
           s.positional = {TensorListRef{{0, 1, 2}}, I(1)};
           return std::vector<Sample>{s};
         });
  define_view_op(reg, "split(Tensor self, int split_size, int dim=0) -> Tensor[]", CostClass::kView,
         [](const OpCall& c) {
           int64_t d = guard(c, [&] { return wrap_dim(c.get_int("dim"), rank0(c), "dim"); });
           int64_t k = c.get_int("split_size"), n = c.tensor(0).shape[d];
           if (k <= 0 && n > 0) fail(c, "split_size must be positive");
           std::vector<TensorMeta> out;
           for (int64_t at = 0; at < n || (n == 0 && out.empty()); at += k) {
             Shape s = c.tensor(0).shape;
             s[d] = std::min(k, n - at);
             out.push_back({s, c.tensor(0).dtype});
             if (n == 0) break;
           }
           return out;
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return kernels::split(in[0], c.get_int("split_size"), c.get_int("dim"));
         },
         [] { return std::vector<Sample>{sample({{7, 5}}, {T(0), I(3), I(0)}), sample({{4, 9}}, {T(0), I(4), I(1)})}; });
  // split_with_sizes: pieces of the given sizes along dim (ATen's checks: sizes >= 0 summing to the
  // dim's size); views of the input, as split's.
  define_view_op(reg, "split_with_sizes(Tensor self, int[] split_sizes, int dim=0) -> Tensor[]", CostClass::kView,
         [](const OpCall& c) {
           const int64_t d = guard(c, [&] { return wrap_dim(c.get_int("dim"), rank0(c), "dim"); });
           const std::vector<int64_t> sizes = c.get_int_list("split_sizes");
           const int64_t n = c.tensor(0).shape.empty() ? 1 : c.tensor(0).shape[d];
           int64_t total = 0;
           for (int64_t k : sizes) {
             if (k < 0) fail(c, absl::StrCat("split_sizes has ", k, "; accepted: sizes >= 0"));
             if (__builtin_add_overflow(total, k, &total)) fail(c, "split_sizes overflow int64");
           }
           if (total != n)
             fail(c, absl::StrCat("split_sizes [", absl::StrJoin(sizes, ", "), "] sum to ", total,
                                  "; accepted: they sum to dim ", d, "'s size ", n));
           std::vector<TensorMeta> out;
           for (int64_t k : sizes) {
             Shape s = c.tensor(0).shape;
             s[d] = k;
             out.push_back({s, c.tensor(0).dtype});
           }
           return out;
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           const int64_t d = wrap_dim(c.get_int("dim"), in[0].dim(), "dim");
           std::vector<Tensor> out;
           int64_t at = 0;
           for (int64_t k : c.get_int_list("split_sizes")) {
             out.push_back(in[0].slice(d, at, at + k, 1));
             at += k;
           }
           return out;
         },
         [] {
           return std::vector<Sample>{sample({{7, 5}}, {T(0), L({2, 0, 5}), I(0)}),
                                      sample({{4, 9}}, {T(0), L({4, 4, 1}), I(-1)})};
         });
  define_view_op(reg, "slice(Tensor self, int dim=0, int? start=None, int? end=None, int step=1) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           int64_t d = guard(c, [&] { return wrap_dim(c.get_int("dim"), rank0(c), "dim"); });
           Tensor probe = Tensor::empty(c.tensor(0).shape.empty() ? Shape{} : Shape{c.tensor(0).shape[d]});
           if (c.get_int("step") <= 0) fail(c, "step must be positive");
           int64_t n = c.tensor(0).shape[d];
           Tensor sl = probe.slice(0, c.get_opt_int("start").value_or(0), c.get_opt_int("end").value_or(n),
                                   c.get_int("step"));
           Shape s = c.tensor(0).shape;
           s[d] = sl.size(0);
           return std::vector<TensorMeta>{{s, c.tensor(0).dtype}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           int64_t d = c.get_int("dim");
           int64_t n = in[0].size(d);
           return one(in[0].slice(d, c.get_opt_int("start").value_or(0), c.get_opt_int("end").value_or(n),
                                  c.get_int("step")));
         },
         [] { return std::vector<Sample>{sample({{7, 6}}, {T(0), I(1), I(1), I(5), I(2)})}; });
  define_view_op(reg, "diagonal(Tensor self, int offset=0, int dim1=0, int dim2=1) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           const Diagonal g = diagonal_of(c, c.tensor(0).shape);
           return std::vector<TensorMeta>{{diagonal_shape(c.tensor(0).shape, g), c.tensor(0).dtype}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           const Diagonal g = diagonal_of(c, in[0].sizes());
           return one(diagonal_view(in[0], c.get_int("offset"), g.d1, g.d2, g.length));
         },
         [] {
           return std::vector<Sample>{sample({{5, 4}}, {T(0), I(1)}), sample({{3, 6, 5}}, {T(0), I(-1), I(2), I(0)}),
                                      sample({{4, 2, 4}}, {T(0), I(0), I(-1), I(0)}, {}, {DType::kInt64})};
         });
  define_view_op(reg, "select(Tensor self, int dim, int index) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           int64_t d = guard(c, [&] { return wrap_dim(c.get_int("dim"), rank0(c), "dim"); });
           int64_t n = c.tensor(0).shape[d], i = c.get_int("index");
           if (i < -n || i >= n) fail(c, absl::StrCat("index ", i, " out of range for dim ", d, " of size ", n));
           Shape s = c.tensor(0).shape;
           s.erase(s.begin() + d);
           return std::vector<TensorMeta>{{s, c.tensor(0).dtype}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(in[0].select(c.get_int("dim"), c.get_int("index")));
         },
         [] { return std::vector<Sample>{sample({{5, 6, 3}}, {T(0), I(1), I(-2)})}; });
  // Their kernels only rearrange or copy elements (Tensor views, copy_strided), whatever the dtype.
  for (const char* name : {"view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "t", "permute",
                           "expand", "cat", "split", "split_with_sizes", "slice", "select", "diagonal"})
    reg.mutable_find(name).complex = true;
}

DTENSOR_FAMILY_PART("view", kDefinitions, define_view_ops);

}  // namespace dtensor::ops
