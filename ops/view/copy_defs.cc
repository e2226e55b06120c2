// Whole-tensor copies and rearrangements with ATen's semantics: clone, alias, flip, repeat,
// constant_pad_nd, fill.Scalar, full_like and copy. Their kernels are Tensor methods and device-dispatched kernels
// (index_select, copy_), so they run where their input is. Rules: ops/view/copy_rules.cc; backward:
// ops/view/copy_backward.cc.
#include <algorithm>
#include <set>

#include "dtensor/core/limits.h"
#include "ops/common/defs.h"
#include "ops/family.h"
#include "ops/view/view_op.h"

namespace dtensor::ops {
namespace {

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }
std::vector<TensorMeta> like_input(const OpCall& c) { return {{c.tensor(0).shape, c.tensor(0).dtype}}; }

// flip's dims, wrapped and checked (torch: "dims has duplicates").
std::vector<int64_t> flip_dims(const OpCall& c) {
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
  std::vector<int64_t> dims;
  std::set<int64_t> seen;
  for (int64_t d : c.get_int_list("dims")) {
    const int64_t w = guard(c, [&] { return wrap_dim(d, std::max<int64_t>(rank, 1), "dims"); });
    if (!seen.insert(w).second) fail(c, absl::StrCat("dim ", w, " appears multiple times in dims"));
    dims.push_back(w);
  }
  return dims;
}

// constant_pad_nd's output shape: pad = (before, after) pairs from the last dim backwards, negative
// values crop; ATen's checks (an even length of at most 2 * rank, no negative size).
Shape padded_shape(const OpCall& c) {
  const Shape& s = c.tensor(0).shape;
  const std::vector<int64_t> pad = c.get_int_list("pad");
  const int64_t rank = static_cast<int64_t>(s.size());
  if (pad.size() % 2 != 0) fail(c, absl::StrCat("pad has ", pad.size(), " values; accepted: pairs (an even length)"));
  if (static_cast<int64_t>(pad.size()) > 2 * rank)
    fail(c, absl::StrCat("pad has ", pad.size(), " values for a ", rank, "-d tensor; accepted: at most ", 2 * rank));
  Shape out = s;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t d = rank - 1 - static_cast<int64_t>(k);
    int64_t n = 0;
    if (__builtin_add_overflow(s[d], pad[2 * k], &n) || __builtin_add_overflow(n, pad[2 * k + 1], &n))
      fail(c, absl::StrCat("padding (", pad[2 * k], ", ", pad[2 * k + 1], ") of dim ", d, " overflows int64"));
    if (n < 0) fail(c, absl::StrCat("padding (", pad[2 * k], ", ", pad[2 * k + 1], ") of dim ", d, " of size ", s[d],
                                    " gives a negative size ", n));
    out[d] = n;
  }
  return out;
}

// repeat's output shape ([1] * lead + self's shape, times repeats), with ATen's checks; the
// kernel and the backward view it as [r0, s0, r1, s1, ...].
Shape repeated_shape(const OpCall& c) {
  const Shape& s = c.tensor(0).shape;
  const std::vector<int64_t> reps = c.get_int_list("repeats");
  if (reps.size() < s.size())
    fail(c, absl::StrCat("repeats has ", reps.size(), " values for a ", s.size(), "-d tensor; accepted: at least ", s.size()));
  if (static_cast<int64_t>(reps.size()) > kMaxTensorRank)
    fail(c, absl::StrCat("repeats has ", reps.size(), " values; accepted: at most ", kMaxTensorRank));
  const size_t lead = reps.size() - s.size();
  Shape out;
  for (size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0) fail(c, absl::StrCat("repeats[", i, "] = ", reps[i], " is negative"));
    const int64_t n = i < lead ? 1 : s[i - lead];
    out.push_back(guard(c, [&] { return checked_mul(reps[i], n, "an output size"); }));
  }
  guard(c, [&] { return numel(out); });  // the element count must fit int64
  return out;
}

// The region select_scatter / slice_scatter replace, as a view of `t` (a block whole along dim).
Tensor scatter_region(const OpCall& c, const Tensor& t) {
  const int64_t d = wrap_dim(c.get_int("dim"), std::max<int64_t>(t.dim(), 1), "dim");
  if (c.op().schema.name == "select_scatter") return t.select(d, c.get_int("index"));
  const int64_t n = t.size(d);
  return t.slice(d, c.get_opt_int("start").value_or(0), c.get_opt_int("end").value_or(n), c.get_int("step"));
}

// ATen's checks of select_scatter / slice_scatter: dim and index in range, a positive step, src
// of the region's shape and self's dtype.
std::vector<TensorMeta> scatter_region_meta(const OpCall& c) {
  const Shape& s = c.tensor(0).shape;
  if (s.empty()) fail(c, "self is 0-d; accepted: a tensor with at least one dim");
  const int64_t d = guard(c, [&] { return wrap_dim(c.get_int("dim"), static_cast<int64_t>(s.size()), "dim"); });
  if (c.op().schema.name == "select_scatter") {
    const int64_t i = c.get_int("index");
    if (i < -s[d] || i >= s[d]) fail(c, absl::StrCat("index ", i, " out of range for dim ", d, " of size ", s[d]));
  } else if (c.get_int("step") <= 0) {
    fail(c, absl::StrCat("step ", c.get_int("step"), "; accepted: a positive step"));
  }
  Shape want = s;  // the region's shape, without touching data
  if (c.op().schema.name == "select_scatter") {
    want.erase(want.begin() + d);
  } else {
    auto wrap = [n = s[d]](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
    const int64_t start = wrap(c.get_opt_int("start").value_or(0)), end = wrap(c.get_opt_int("end").value_or(s[d]));
    const int64_t step = c.get_int("step");
    want[d] = end > start ? (end - start - 1) / step + 1 : 0;
  }
  if (c.tensor(1).shape != want)
    fail(c, absl::StrCat("src ", shape_str(c.tensor(1).shape), "; accepted: the region's shape ", shape_str(want)));
  if (c.tensor(1).dtype != c.tensor(0).dtype)
    fail(c, absl::StrCat("src has dtype ", dtype_name(c.tensor(1).dtype), "; accepted: self's, ",
                         dtype_name(c.tensor(0).dtype)));
  return like_input(c);
}

}  // namespace

void define_copy_ops(Registry& reg) {
  define_view_op(reg, "clone(Tensor self) -> Tensor", CostClass::kCopy, like_input,
         [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) { return one(in[0].clone()); },
         [] { return std::vector<Sample>{sample({{5, 4}}, {T(0)}), sample({{3, 1, 6}}, {T(0)}, {}, {DType::kInt64})}; });
  // ATen's alias is a view sharing storage: the block itself.
  define_view_op(reg, "alias(Tensor self) -> Tensor", CostClass::kView, like_input,
         [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) { return one(in[0]); },
         [] { return std::vector<Sample>{sample({{5, 4}}, {T(0)})}; });
  define_view_op(reg, "flip(Tensor self, int[] dims) -> Tensor", CostClass::kCopy,
         [](const OpCall& c) {
           flip_dims(c);
           return like_input(c);
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           Tensor x = in[0];
           if (x.dim() == 0) return one(x.clone());
           for (const int64_t d : flip_dims(c)) {
             const int64_t n = x.sizes()[d];
             std::vector<int64_t> reversed(n);
             for (int64_t i = 0; i < n; ++i) reversed[i] = n - 1 - i;
             x = kernels::index_select(x, d, Tensor::from_vector(reversed, {n}).to(x.device()));
           }
           return one(x.contiguous());
         },
         [] {
           return std::vector<Sample>{sample({{5, 4, 3}}, {T(0), L({0, 2})}), sample({{6, 5}}, {T(0), L({-1})}),
                                      sample({{4, 6}}, {T(0), L({0})}, {}, {DType::kInt64})};
         });
  define_view_op(reg, "repeat(Tensor self, int[] repeats) -> Tensor", CostClass::kCopy,
         [](const OpCall& c) { return std::vector<TensorMeta>{{repeated_shape(c), c.tensor(0).dtype}}; },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           const std::vector<int64_t> reps = c.get_int_list("repeats");
           const Shape& s = in[0].sizes();
           const size_t lead = reps.size() - s.size();
           Shape ones, interleaved, out;
           for (size_t i = 0; i < reps.size(); ++i) {
             const int64_t n = i < lead ? 1 : s[i - lead];
             ones.insert(ones.end(), {1, n});
             interleaved.insert(interleaved.end(), {reps[i], n});
             out.push_back(reps[i] * n);
           }
           return one(in[0].reshape(ones).expand(interleaved).contiguous().reshape(out));
         },
         [] {
           return std::vector<Sample>{sample({{4, 3}}, {T(0), L({1, 2})}), sample({{6, 2}}, {T(0), L({2, 1, 3})}),
                                      sample({{5}}, {T(0), L({3})}, {}, {DType::kInt64})};
         });
  define_view_op(reg, "constant_pad_nd(Tensor self, int[] pad, Scalar value=0) -> Tensor", CostClass::kCopy,
         [](const OpCall& c) { return std::vector<TensorMeta>{{padded_shape(c), c.tensor(0).dtype}}; },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
           const Tensor& x = in[0];
           const std::vector<int64_t> pad = c.get_int_list("pad");
           Tensor out = Tensor::full(ctx.out_block(0).first, c.get_double("value"), x.dtype(), x.device());
           // The overlap of input and output per padded dim: [max(0, -before), size - max(0, -after))
           // of the input lands at max(0, before) of the output.
           Tensor src = x, dst = out;
           for (size_t k = 0; k < pad.size() / 2; ++k) {
             const int64_t d = x.dim() - 1 - static_cast<int64_t>(k);
             const int64_t before = pad[2 * k], after = pad[2 * k + 1], n = x.sizes()[d];
             const int64_t from = std::max<int64_t>(0, -before), to = n - std::max<int64_t>(0, -after);
             if (to <= from) return one(out);  // cropped to nothing: only the fill value
             src = src.slice(d, from, to);
             dst = dst.slice(d, std::max<int64_t>(0, before), std::max<int64_t>(0, before) + (to - from));
           }
           dst.copy_(src);
           return one(out);
         },
         [] {
           return std::vector<Sample>{sample({{4, 5}}, {T(0), L({1, 2})}),
                                      sample({{3, 4, 6}}, {T(0), L({2, -1, 0, 1}), V(1.5)}),
                                      sample({{5, 3}}, {T(0), L({0, 0, -1, 2}), I(7)}, {}, {DType::kInt64})};
         });
  define_view_op(reg, "fill.Scalar(Tensor self, Scalar value) -> Tensor", CostClass::kElementwise, like_input,
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(Tensor::full(in[0].sizes(), c.get_double("value"), in[0].dtype(), in[0].device()));
         },
         [] {
           return std::vector<Sample>{sample({{5, 4}}, {T(0), V(2.5)}),
                                      sample({{3, 6}}, {T(0), I(-4)}, {}, {DType::kInt64})};
         });
  // full_like: fill's output in `dtype` (default self's; the value cast as torch casts it: 2.5 -> 2
  // for integers). ATen's layout, device, pin_memory and memory_format arguments are the bridge's
  // to check (a strided tensor on self's device).
  OpDef& like = define_view_op(
      reg, "full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None) -> Tensor", CostClass::kElementwise,
      [](const OpCall& c) {
        const DType d = c.has("dtype") ? guard(c, [&] { return dtype_from_name(c.get_str("dtype")); }) : c.tensor(0).dtype;
        return std::vector<TensorMeta>{{c.tensor(0).shape, d}};
      },
      [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
        return one(Tensor::full(in[0].sizes(), c.get_double("fill_value"), ctx.out_meta[0].dtype, in[0].device()));
      },
      [] {
        return std::vector<Sample>{sample({{5, 4}}, {T(0), V(-1.25)}),
                                   sample({{3, 6}}, {T(0), V(2.5)}, {{"dtype", V(std::string("int64"))}}),
                                   sample({{4, 3}}, {T(0), I(7)}, {}, {DType::kInt64})};
      });
  like.aten.aliases = {{"full_like", "full_like"}};  // ATen's layout/device/memory_format checked, then dropped
  // select_scatter(self, src, dim, index) / slice_scatter(self, src, dim, start, end, step): self
  // with the region select / slice would view replaced by src.
  for (const char* schema :
       {"select_scatter(Tensor self, Tensor src, int dim, int index) -> Tensor",
        "slice_scatter(Tensor self, Tensor src, int dim=0, int? start=None, int? end=None, int step=1) -> Tensor"}) {
    const bool select = std::string(schema).rfind("select", 0) == 0;
    define_view_op(
        reg, schema, CostClass::kCopy, scatter_region_meta,
        [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
          Tensor out = in[0].clone();
          Tensor region = scatter_region(c, out);
          if (region.numel() > 0) region.copy_(in[1]);
          return one(out);
        },
        [select] {
          if (select)
            return std::vector<Sample>{sample({{5, 4}, {4}}, {T(0), T(1), I(0), I(-2)}),
                                       sample({{3, 6, 2}, {3, 2}}, {T(0), T(1), I(1), I(4)}, {},
                                              {DType::kInt64, DType::kInt64})};
          return std::vector<Sample>{sample({{6, 5}, {2, 5}}, {T(0), T(1), I(0), I(1), I(5), I(2)}),
                                     sample({{4, 7}, {4, 3}}, {T(0), T(1), I(1), I(-3)})};
        });
  }
  // copy(self, src): src broadcast to self's shape and cast to its dtype (the out-of-place copy_
  // that functionalized graphs hold); self gives only its shape, dtype and device.
  define_view_op(
      reg, "copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor", CostClass::kCopy,
      [](const OpCall& c) {
        const Shape& self = c.tensor(0).shape;
        const Shape& src = c.tensor(1).shape;
        const size_t lead = self.size() >= src.size() ? self.size() - src.size() : 0;
        bool ok = src.size() <= self.size();
        for (size_t j = 0; ok && j < src.size(); ++j) ok = src[j] == 1 || src[j] == self[lead + j];
        if (!ok)
          fail(c, absl::StrCat("src ", shape_str(src), " does not broadcast to self ", shape_str(self),
                               "; accepted: each src dim 1 or self's (aligned from the right), at most self's rank"));
        return std::vector<TensorMeta>{c.tensor(0)};
      },
      [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
        Tensor out = Tensor::empty(in[0].sizes(), in[0].dtype(), in[0].device());
        if (out.numel() > 0) out.copy_(in[1].expand(in[0].sizes()));
        return one(out);
      },
      [] {
        return std::vector<Sample>{sample({{5, 4}, {5, 4}}, {T(0), T(1)}),
                                   sample({{3, 6}, {6}}, {T(0), T(1)}, {}, {DType::kFloat64, DType::kFloat32}),
                                   sample({{2, 3, 4}, {3, 1}}, {T(0), T(1)}),
                                   sample({{4, 5}, {4, 5}}, {T(0), T(1)}, {}, {DType::kInt64, DType::kFloat32})};
      });
  // Copies through copy_strided, which converts complex (to a real dtype: the real part, as torch);
  // fill and full_like write a real value (imaginary part 0: their Scalar is real here).
  for (const char* name : {"clone", "alias", "copy", "fill.Scalar", "full_like", "select_scatter", "slice_scatter",
                           "constant_pad_nd"})
    reg.mutable_find(name).complex = true;
  reg.mutable_find("constant_pad_nd").samples = [base = reg.mutable_find("constant_pad_nd").samples] {
    std::vector<Sample> s = base();
    s.push_back(sample({{3, 4, 6}}, {T(0), L({2, -1, 0, 1}), V(1.5)}, {}, {DType::kComplex64}));
    return s;
  };
}

DTENSOR_FAMILY_PART("view", kDefinitions, define_copy_ops);

}  // namespace dtensor::ops
