// Backward ops that autograd/ calls by their ATen names: gelu_backward, embedding_dense_backward,
// nll_loss_backward, slice_backward, select_backward, the pooling backward ops
// (avg_pool{1,2,3}d_backward, max_pool{1,2,3}d_with_indices_backward, adaptive_avg_pool2d_backward),
// value_selecting_reduction_backward and the scan backward ops (cummaxmin_backward,
// cumprod_backward, logcumsumexp_backward). Kernels: kernels/cpu/grad_kernels.h and the backward
// kernels of pooling.h, scan.h and selection.h. Each gradient has its input's dtype (grad's dtype
// where the op has no input tensor). Rules: strategies/backward.cc.
//
// Validator data: where one tensor input must agree with another (max-pool indices with `self`,
// cumprod's `output` with `input`, ...), make_input builds the agreeing pair from a fixed seed so
// that each tensor can be made on its own (make_input is called per tensor); the gradient keeps the
// validator's seed.
#include <algorithm>

#include "dtensor/partial_split.h"
#include "kernels/cpu/grad_kernels.h"
#include "kernels/cpu/pooling.h"
#include "kernels/cpu/scan.h"
#include "kernels/cpu/selection.h"
#include "ops/defs/steps.h"

namespace dtensor::ops {
namespace {

constexpr uint64_t kFixedSeed = 0x5eed5eedull;

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

int64_t rank_of(const OpCall& c, int t) { return static_cast<int64_t>(c.tensor(t).shape.size()); }

// Zero blocks of every output: what a rank computes when a sharded input block of it is empty
// (its outputs are then empty too, or Partial pieces whose identity is 0).
std::vector<Tensor> zero_outputs(const LocalContext& ctx) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < ctx.out_meta.size(); ++i)
    out.push_back(Tensor::zeros(ctx.out_block(static_cast<int>(i)).first, ctx.out_meta[i].dtype));
  return out;
}

// A kernel that returns zero blocks for a rank whose output blocks are empty or whose block of a
// data input is empty (the CPU kernels reject some empty dims, e.g. pooling's channels), and that
// prefixes kernel errors with the call. `data` lists the inputs whose values the result is made
// of (empty: all); an input read for its shape only (pooling's self) may be empty on a rank that
// still adds gradient to a Partial result.
KernelFn guarded(KernelFn k, std::vector<int> data = {}) {
  return [k, data](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    if (!ctx.single_device()) {
      bool empty = false;
      for (size_t i = 0; i < ctx.out_meta.size(); ++i) empty |= numel(ctx.out_block(static_cast<int>(i)).first) == 0;
      for (size_t t = 0; t < in.size(); ++t)
        if (data.empty() || std::find(data.begin(), data.end(), static_cast<int>(t)) != data.end())
          empty |= in[t].numel() == 0;
      if (empty) return zero_outputs(ctx);
    }
    return guard(c, [&] { return k(in, c, ctx); });
  };
}

void check_floating(const OpCall& c, int t, const char* what) {
  if (!is_floating(c.tensor(t).dtype))
    fail(c, absl::StrCat(what, " must be floating, got ", dtype_name(c.tensor(t).dtype)));
}

void check_index(const OpCall& c, int t, const char* what) {
  DType d = c.tensor(t).dtype;
  if (d != DType::kInt64 && d != DType::kInt32)
    fail(c, absl::StrCat(what, " must be int64 or int32, got ", dtype_name(d)));
}

void check_shape(const OpCall& c, int t, const char* what, const Shape& want) {
  if (c.tensor(t).shape != want)
    fail(c, absl::StrCat(what, " has shape ", shape_str(c.tensor(t).shape), ", accepted: ",
                         shape_str(want)));
}

int64_t dim_arg(const OpCall& c, int64_t rank, const char* name = "dim") {
  return guard(c, [&] { return wrap_dim(c.get_int(name), rank, name); });
}

// ---------------------------------------------------------------------------------------------
// gelu_backward

void define_gelu_backward(Registry& reg) {
  OpDef& op = reg.define("gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor",
                         "backward");
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad_output");
    check_floating(c, 1, "self");
    const std::string a = c.get_str("approximate");
    if (a != "none" && a != "tanh") fail(c, "approximate must be 'none' or 'tanh', got '" + a + "'");
    Shape s = guard(c, [&] { return kernels::broadcast_shapes(c.tensor(0).shape, c.tensor(1).shape); });
    return std::vector<TensorMeta>{{s, kernels::promote_types(c.tensor(0).dtype, c.tensor(1).dtype)}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    return one(kernels::gelu_backward(in[0], in[1], c.get_str("approximate")));
  });
  op.samples = [] {
    return std::vector<Sample>{
        sample({{6, 5}, {6, 5}}, {T(0), T(1)}),
        sample({{3, 7}, {3, 7}}, {T(0), T(1)}, {{"approximate", V(std::string("tanh"))}}),
        sample({{4, 7, 3}, {7, 1}}, {T(0), T(1)})};
  };
}

// ---------------------------------------------------------------------------------------------
// embedding_dense_backward

void define_embedding_dense_backward(Registry& reg) {
  OpDef& op = reg.define(
      "embedding_dense_backward(Tensor grad_output, Tensor indices, int num_weights, int padding_idx=-1) -> Tensor",
      "backward");
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad_output");
    check_index(c, 1, "indices");
    const Shape& g = c.tensor(0).shape;
    if (g.empty()) fail(c, "grad_output must be [*indices.shape, D], got a 0-d tensor");
    Shape want = c.tensor(1).shape;
    want.push_back(g.back());
    check_shape(c, 0, "grad_output ([*indices.shape, D])", want);
    const int64_t n = c.get_int("num_weights");
    if (n < 0) fail(c, absl::StrCat("num_weights ", n, " must be >= 0"));
    return std::vector<TensorMeta>{{{n, g.back()}, c.tensor(0).dtype}};
  };
  // Rows [row_start, row_start + rows) of the result: all of them, or this rank's row shard.
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    auto [shape, offset] = ctx.out_block(0);
    return one(kernels::embedding_dense_backward(in[0], in[1], c.get_int("num_weights"),
                                                 c.get_int("padding_idx"), offset[0], shape[0]));
  });
  op.samples = [] {
    return std::vector<Sample>{
        sample({{4, 5, 6}, {4, 5}}, {T(0), T(1), I(11)}, {}, {DType::kFloat32, DType::kInt64}),
        sample({{9, 5}, {9}}, {T(0), T(1), I(7), I(2)}, {}, {DType::kFloat32, DType::kInt32})};
  };
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 1) return index_input(c.tensor(1), c.get_int("num_weights"), seed);
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

// ---------------------------------------------------------------------------------------------
// nll_loss_backward: tensors grad_output (0), self (1), target (2), weight (3, optional).

void define_nll_loss_backward(Registry& reg) {
  OpDef& op = reg.define(
      "nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight=None, str reduction='mean', int ignore_index=-100) -> Tensor",
      "backward");
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad_output");
    check_floating(c, 1, "self");
    check_index(c, 2, "target");
    const Shape& x = c.tensor(1).shape;
    const Shape& t = c.tensor(2).shape;
    bool ok = (x.size() == 2 && t.size() == 1 && t[0] == x[0]) || (x.size() == 1 && t.empty());
    if (!ok) fail(c, "accepted: self [N, C] with target [N], or self [C] with target []");
    const std::string red = c.get_str("reduction");
    if (red != "mean" && red != "sum" && red != "none") fail(c, "reduction must be 'mean', 'sum' or 'none'");
    check_shape(c, 0, "grad_output (the loss output's shape)", red == "none" ? t : Shape{});
    if (c.has("weight")) {
      const int w = c.tensor_index("weight");
      check_floating(c, w, "weight");
      check_shape(c, w, "weight", Shape{x.back()});
    }
    return std::vector<TensorMeta>{c.tensor(1)};
  };
  // This rank's block of self: rows [r0, r0 + n) (all for 1-d self) and classes [c0, c0 + m).
  // Target rows (and grad rows for 'none') are cut from their own blocks, which the rules make
  // either aligned with self's rows or whole; 'mean' divides by the total weight of the whole
  // target (its rules keep target replicated).
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const bool two_d = rank_of(c, 1) == 2;
    const std::string red = c.get_str("reduction");
    const int64_t ignore = c.get_int("ignore_index");
    const auto block = ctx.in_block(c, 1);
    const Shape& shape = block.first;
    const Shape& offset = block.second;
    std::optional<Tensor> weight;
    if (c.has("weight")) weight = in[c.tensor_index("weight")];
    Tensor target = in[2], grad = in[0];
    std::optional<double> total;
    if (two_d) {
      auto rows = [&](const Tensor& t, int index) {
        const int64_t at = offset[0] - ctx.in_block(c, index).second[0];
        DT_CHECK(at >= 0 && at + shape[0] <= t.size(0), "internal: rows [", offset[0], ", ",
                 offset[0] + shape[0], ") are not in this rank's block of tensor ", index);
        return t.narrow(0, at, shape[0]);
      };
      if (red == "mean") {
        DT_CHECK(ctx.in_whole_along(c, 2, 0), "'mean' needs the whole target (replicated)");
        total = kernels::nll_loss_total_weight(target, weight, ignore);
      }
      target = rows(target, 2);
      if (red == "none") grad = rows(grad, 0);
    }
    return one(kernels::nll_loss_backward(grad, shape, ctx.out_meta[0].dtype, target, weight, red, ignore,
                                          total, offset.back(), c.tensor(1).shape.back()));
  });
  op.samples = [] {
    using D = DType;
    const std::vector<DType> with_w{D::kFloat32, D::kFloat32, D::kInt64, D::kFloat32};
    return std::vector<Sample>{
        sample({{7}, {7, 5}, {7}}, {T(0), T(1), T(2)}, {{"reduction", V(std::string("none"))}},
               {D::kFloat32, D::kFloat32, D::kInt64}),
        sample({{}, {6, 4}, {6}, {4}}, {T(0), T(1), T(2), T(3)},
               {{"reduction", V(std::string("sum"))}, {"ignore_index", I(1)}}, with_w),
        sample({{}, {7, 5}, {7}, {5}}, {T(0), T(1), T(2), T(3)}, {{"ignore_index", I(2)}}, with_w),
        sample({{5}, {5, 3}, {5}}, {T(0), T(1), T(2)},
               {{"reduction", V(std::string("none"))}, {"ignore_index", I(0)}},
               {D::kFloat32, D::kFloat32, D::kInt32}),
        sample({{}, {5}, {}}, {T(0), T(1), T(2)}, {}, {D::kFloat32, D::kFloat32, D::kInt64})};
  };
  // Targets are class indices (some equal to ignore_index in the samples that set it to a class);
  // class weights are positive.
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 2) return index_input(c.tensor(2), c.tensor(1).shape.back(), seed);
    if (i == 3) return positive_input(c.tensor(3), seed);
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

// ---------------------------------------------------------------------------------------------
// slice_backward / select_backward: the local result block comes from ctx.out_block(0), filled
// from the overlap with this rank's grad block.

struct SliceArgs {
  Shape sizes;
  int64_t dim = 0, start = 0, end = 0, step = 1;
  bool select = false;
};

SliceArgs slice_args(const OpCall& c, bool select) {
  SliceArgs a;
  a.select = select;
  for (int64_t s : c.get_int_list("input_sizes")) {
    if (s < 0) fail(c, absl::StrCat("input_sizes has a negative size ", s));
    a.sizes.push_back(s);
  }
  if (a.sizes.empty()) fail(c, "input_sizes must have at least one dim");
  a.dim = dim_arg(c, static_cast<int64_t>(a.sizes.size()));
  const int64_t n = a.sizes[a.dim];
  if (select) {
    int64_t idx = c.get_int("index");
    if (idx < -n || idx >= n)
      fail(c, absl::StrCat("index ", idx, " out of range for dim ", a.dim, " of size ", n, " (accepted: ", -n,
                           " <= index < ", n, ")"));
    a.start = idx < 0 ? idx + n : idx;
    a.end = a.start + 1;
    return a;
  }
  a.step = c.get_int("step");
  if (a.step < 1) fail(c, absl::StrCat("step ", a.step, " must be >= 1"));
  // Python's normalization (the caller normally passes normalized, clamped values).
  a.start = c.get_int("start");
  a.end = c.get_int("end");
  if (a.start < 0) a.start += n;
  if (a.end < 0) a.end += n;
  a.start = std::clamp<int64_t>(a.start, 0, n);
  a.end = std::clamp<int64_t>(a.end, a.start, n);
  return a;
}

// grad_output's expected shape.
Shape grad_shape(const SliceArgs& a) {
  Shape g = a.sizes;
  if (a.select) g.erase(g.begin() + a.dim);
  else g[a.dim] = (a.end - a.start + a.step - 1) / a.step;
  return g;
}

void define_slice_select_backward(Registry& reg, bool select) {
  OpDef& op = reg.define(
      select ? "select_backward(Tensor grad_output, int[] input_sizes, int dim, int index) -> Tensor"
             : "slice_backward(Tensor grad_output, int[] input_sizes, int dim, int start, int end, int step) -> Tensor",
      "backward");
  op.meta = [select](const OpCall& c) {
    SliceArgs a = slice_args(c, select);
    check_shape(c, 0, "grad_output", grad_shape(a));
    return std::vector<TensorMeta>{{a.sizes, c.tensor(0).dtype}};
  };
  op.kernel = guarded([select](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    SliceArgs a = slice_args(c, select);
    auto [shape, offset] = ctx.out_block(0);
    Tensor g = in[0];
    Shape goff = ctx.in_block(c, 0).second;
    if (select) {
      g = g.unsqueeze(a.dim);
      goff.insert(goff.begin() + a.dim, 0);
    }
    return one(kernels::slice_backward_block(g, goff, a.sizes, a.dim, a.start, a.end, a.step, shape, offset));
  });
  op.samples = [select] {
    if (select)
      return std::vector<Sample>{sample({{7}}, {T(0), L({7, 5}), I(1), I(-2)}),
                                 sample({{3, 4}}, {T(0), L({3, 5, 4}), I(1), I(2)}),
                                 sample({{5, 3}}, {T(0), L({5, 3, 2}), I(-1), I(0)})};
    return std::vector<Sample>{sample({{7, 3}}, {T(0), L({7, 9}), I(1), I(1), I(8), I(3)}),
                               sample({{3, 2, 4}}, {T(0), L({3, 5, 4}), I(-2), I(2), I(4), I(1)}),
                               sample({{3, 5}}, {T(0), L({11, 5}), I(0), I(0), I(11), I(4)})};
  };
}

// ---------------------------------------------------------------------------------------------
// Pooling backward: tensors grad_output (0), self (1), indices (2, max pooling).

enum class Pool { kAvg, kMax, kAdaptive };

struct PoolArgs {
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode = false, count_include_pad = true;
  std::optional<int64_t> divisor;
};

std::vector<int64_t> per_dim(std::vector<int64_t> v, int dims, std::vector<int64_t> fallback) {
  if (v.empty()) v = std::move(fallback);
  if (v.size() == 1) v.assign(dims, v[0]);
  return v;
}

PoolArgs pool_args(const OpCall& c, Pool p, int dims) {
  PoolArgs a;
  a.kernel = per_dim(c.get_int_list("kernel_size"), dims, {});
  a.stride = per_dim(c.get_int_list("stride"), dims, a.kernel);
  a.padding = per_dim(c.get_int_list("padding"), dims, {0});
  a.dilation = per_dim(p == Pool::kMax ? c.get_int_list("dilation") : std::vector<int64_t>{}, dims, {1});
  a.ceil_mode = c.get_bool("ceil_mode");
  if (p == Pool::kAvg) {
    a.count_include_pad = c.get_bool("count_include_pad");
    a.divisor = c.get_opt_int("divisor_override");
  }
  return a;
}

// The forward output's shape for self (checked like the forward op).
Shape pool_forward_shape(const OpCall& c, Pool p, int dims) {
  const Shape& x = c.tensor(1).shape;
  if (x.size() != static_cast<size_t>(dims + 1) && x.size() != static_cast<size_t>(dims + 2))
    fail(c, absl::StrCat("self must be [N, C, spatial...] or [C, spatial...] with ", dims, " spatial dims"));
  check_floating(c, 1, "self");
  check_floating(c, 0, "grad_output");
  const size_t lead = x.size() - dims;
  Shape out(x.begin(), x.begin() + lead);
  if (p == Pool::kAdaptive) {
    const Shape& g = c.tensor(0).shape;
    if (g.size() != x.size()) fail(c, "grad_output must have self's rank");
    for (int k = 0; k < dims; ++k) out.push_back(g[lead + k]);
    return out;
  }
  PoolArgs a = pool_args(c, p, dims);
  auto o = guard(c, [&] {
    return kernels::pool_output_size(Shape(x.begin() + lead, x.end()), a.kernel, a.stride, a.padding,
                                     a.dilation, a.ceil_mode);
  });
  for (int64_t v : o) {
    if (v < 1) fail(c, "the forward output would be empty; accepted: kernel no larger than the padded input");
    out.push_back(v);
  }
  return out;
}

std::string pool_name(Pool p, int dims) {
  std::string d = std::to_string(dims);
  if (p == Pool::kAvg) return "avg_pool" + d + "d_backward";
  if (p == Pool::kMax) return "max_pool" + d + "d_with_indices_backward";
  return "adaptive_avg_pool" + d + "d_backward";
}

// Forward parameters of the validator samples: (kernel, stride, padding, dilation, ceil_mode).
struct PoolSample {
  int64_t k, s, p, d;
  bool ceil;
};

// Input rows [lo, hi) of spatial dim k that output rows [olo, ohi) read (empty: (0, 0)).
std::pair<int64_t, int64_t> needed_rows(Pool p, const std::optional<PoolArgs>& a, int k, int64_t olo,
                                        int64_t ohi, int64_t in, int64_t out) {
  if (olo >= ohi) return {0, 0};
  if (p == Pool::kAdaptive) return kernels::adaptive_pool_input_range(olo, ohi, in, out);
  return kernels::pool_input_range(olo, ohi, in, a->kernel[k], a->stride[k], a->padding[k], a->dilation[k]);
}

// The backward halo exchange, the forward's (pooling_ops.cc) run backwards, for spatial dims
// sharded alike on grad_output, self (and indices), each by one mesh dim. Each rank computes the
// gradient of its output rows w.r.t. the input rows their windows read -- its own rows plus halo
// rows of its neighbours -- as a slab (kernels/cpu/pooling.h), in float64. Then, one sharded
// spatial dim at a time in reverse mesh-dim order, it sends the halo rows' partial sums to their
// owners (batched send/recv within that mesh dim's group) and adds what it receives into its own
// rows. The result is S(d) like self: only halo rows travel, nothing when shard boundaries fall on
// window boundaries.
StepDef halo_backward(Pool p, int dims) {
  StepDef step;
  step.name = "halo_exchange";
  // Valid when each spatial dim is sharded by one mesh dim at most, and with no Partial grad on
  // another mesh dim: the sum would be exact, but the validator's step path compares without the
  // rounding allowance of Partial pieces, which a bfloat16 result needs (its pieces round apart).
  step.valid = [dims](const OpCall& c, const Strategy& st) {
    for (const Placement& x : st.inputs[0])
      if (x.is_partial()) return false;
    const int lead = static_cast<int>(c.tensor(1).shape.size()) - dims;
    std::vector<int> count(c.tensor(1).shape.size(), 0);
    for (const Placement& x : st.inputs[1])
      if (x.is_shard() && ++count[x.dim] > 1 && x.dim >= lead) return false;
    return true;
  };
  step.traffic = [p, dims](const OpCall& c, const Strategy& st, const std::vector<int>& mesh_dims) {
    std::optional<PoolArgs> a;
    if (p != Pool::kAdaptive) a = pool_args(c, p, dims);
    const Shape& x = c.tensor(1).shape;
    const Shape& out = c.tensor(0).shape;
    const int lead = static_cast<int>(x.size()) - dims;
    // Average bytes a rank sends: the halo rows it computed for others, as float64, times the
    // elements of one row of the block at coordinate 0.
    Shape block = local_block(x, st.inputs[1], c.mesh_shape(), std::vector<int64_t>(c.mesh_shape().size(), 0)).first;
    int64_t bytes = 0;
    for (int md : mesh_dims) {
      const int td = st.inputs[1][md].dim, k = td - lead;
      const int64_t n = c.mesh_shape()[md], L = x[td], O = out[td];
      const int64_t row = numel(block) / std::max<int64_t>(block[td], 1) * 8;
      int64_t rows = 0;
      for (int64_t q = 0; q < n; ++q) {
        auto [olo, olen] = chunk_range(O, n, q);
        auto [nlo, nhi] = needed_rows(p, a, k, olo, olo + olen, L, O);
        for (int64_t r = 0; r < n; ++r) {
          if (r == q) continue;
          auto [ilo, ilen] = chunk_range(L, n, r);
          rows += std::max<int64_t>(0, std::min(nhi, ilo + ilen) - std::max(nlo, ilo));
        }
      }
      bytes += rows * row / n;
    }
    return StepTraffic{CommKind::kSendRecv, bytes, 1};
  };
  step.run = [p, dims](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                       const std::vector<int>& mesh_dims, const DeviceMesh& mesh, Timeout timeout) {
    std::optional<PoolArgs> a;
    if (p != Pool::kAdaptive) a = pool_args(c, p, dims);
    const Shape& gx = c.tensor(1).shape;
    const Shape& gg = c.tensor(0).shape;
    const int lead = static_cast<int>(gx.size()) - dims;
    const auto gb = ctx.in_block(c, 0);  // this rank's output rows
    Shape slab_shape = ctx.in_block(c, 1).first;
    std::vector<kernels::PoolSlab> slabs;
    std::vector<std::pair<int, int>> sharded;  // (tensor dim, mesh dim)
    for (int md : mesh_dims) {
      const int td = ctx.strategy->inputs[1][md].dim, k = td - lead;
      const int64_t olo = gb.second[td], ohi = olo + gb.first[td];
      auto [nlo, nhi] = needed_rows(p, a, k, olo, ohi, gx[td], gg[td]);
      slab_shape[td] = nhi - nlo;
      slabs.push_back({k, gx[td], nlo, olo, ohi, gg[td]});
      sharded.push_back({td, md});
    }
    Tensor g;
    if (numel(slab_shape) == 0 || in[0].numel() == 0) {
      g = Tensor::zeros(slab_shape, DType::kFloat64);
    } else {
      const Tensor grad = in[0].to(DType::kFloat64);
      g = guard(c, [&] {
        switch (p) {
          case Pool::kAvg:
            return kernels::avg_pool_backward(grad, Tensor::zeros({}, DType::kFloat64).expand(slab_shape), dims,
                                              a->kernel, a->stride, a->padding, a->ceil_mode, a->count_include_pad,
                                              a->divisor, slabs);
          case Pool::kMax: return kernels::max_pool_backward(grad, in[2], slab_shape, dims, slabs);
          case Pool::kAdaptive: return kernels::adaptive_avg_pool2d_backward(grad, slab_shape, slabs);
        }
        return Tensor();
      });
    }
    for (int i = static_cast<int>(sharded.size()) - 1; i >= 0; --i) {
      const auto [td, md] = sharded[i];
      const int k = td - lead;
      ProcessGroup& grp = mesh.group(md);
      const int n = grp.size(), me = grp.rank();
      const int64_t L = gx[td], O = gg[td];
      auto own = [&](int r) {
        auto [lo, len] = chunk_range(L, n, r);
        return std::pair{lo, lo + len};
      };
      auto need = [&](int r) {
        auto [lo, len] = chunk_range(O, n, r);
        return needed_rows(p, a, k, lo, lo + len, L, O);
      };
      const auto [nlo, nhi] = need(me);
      const auto [mlo, mhi] = own(me);
      DT_CHECK(g.size(td) == nhi - nlo, "internal: slab of ", g.size(td), " rows for rows [", nlo, ", ", nhi, ")");
      Shape acc_shape = g.sizes();
      acc_shape[td] = mhi - mlo;
      Tensor acc = Tensor::zeros(acc_shape, DType::kFloat64);
      std::vector<P2POp> ops;
      std::vector<std::pair<Tensor, int64_t>> received;  // (rows, at own row)
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        auto [olo, ohi] = own(r);  // r's rows that my windows read
        const int64_t a0 = std::max(nlo, olo), b0 = std::min(nhi, ohi);
        if (a0 < b0) ops.push_back({P2POp::kSend, g.narrow(td, a0 - nlo, b0 - a0).contiguous(), r, 0});
        auto [rlo, rhi] = need(r);  // my rows that r's windows read
        const int64_t a1 = std::max(rlo, mlo), b1 = std::min(rhi, mhi);
        if (a1 < b1) {
          Shape s = acc_shape;
          s[td] = b1 - a1;
          Tensor buf = Tensor::empty(s, DType::kFloat64);
          ops.push_back({P2POp::kRecv, buf, r, 0});
          received.push_back({buf, a1 - mlo});
        }
      }
      if (!ops.empty()) grp.batch_isend_irecv(ops, timeout);
      auto add_at = [&](const Tensor& rows, int64_t at) {
        Tensor dst = acc.narrow(td, at, rows.size(td));
        dst.copy_(kernels::add(dst, rows));
      };
      const int64_t a2 = std::max(nlo, mlo), b2 = std::min(nhi, mhi);
      if (a2 < b2) add_at(g.narrow(td, a2 - nlo, b2 - a2), a2 - mlo);
      for (const auto& [buf, at] : received) add_at(buf, at);
      g = acc;
    }
    return std::vector<Tensor>{g.to(ctx.out_meta[0].dtype)};
  };
  return step;
}

void define_pool_backward(Registry& reg, Pool p, int dims) {
  const std::string d = std::to_string(dims);
  const std::string li = "int[" + d + "] ";
  std::string args;
  if (p == Pool::kAvg)
    args = li + "kernel_size, " + li + "stride, " + li +
           "padding, bool ceil_mode, bool count_include_pad, int? divisor_override";
  else if (p == Pool::kMax)
    args = li + "kernel_size, " + li + "stride, " + li + "padding, " + li + "dilation, bool ceil_mode, Tensor indices";
  std::string schema = pool_name(p, dims) + "(Tensor grad_output, Tensor self" + (args.empty() ? "" : ", " + args) +
                       ") -> Tensor";
  OpDef& op = reg.define(schema, "backward");
  op.meta = [p, dims](const OpCall& c) {
    Shape out = pool_forward_shape(c, p, dims);
    check_shape(c, 0, "grad_output (the forward output's shape)", out);
    if (p == Pool::kMax) {
      if (c.tensor(2).dtype != DType::kInt64) fail(c, "indices must be int64");
      check_shape(c, 2, "indices", out);
    }
    return std::vector<TensorMeta>{c.tensor(1)};
  };
  // The local kernel (rows without the halo step): the result block is self's block under the
  // batch rules, the whole input under P(sum) rows. A grad block holding some output rows of a
  // spatial dim is passed as a slab over the whole input (kernels/cpu/pooling.h); max-pool indices
  // are global already.
  op.kernel = guarded([p, dims](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const DType dt = ctx.out_meta[0].dtype;
    const Shape shape = ctx.out_block(0).first;
    if (p == Pool::kMax) return one(kernels::max_pool_backward(in[0], in[2], shape, dims).to(dt));
    const Shape& gx = c.tensor(1).shape;
    const Shape& gg = c.tensor(0).shape;
    const size_t lead = gx.size() - dims;
    const auto gb = ctx.in_block(c, 0);
    std::vector<kernels::PoolSlab> slabs;
    for (int k = 0; k < dims; ++k) {
      const size_t d = lead + k;
      if (gb.first[d] == gg[d]) continue;
      slabs.push_back({k, gx[d], 0, gb.second[d], gb.second[d] + gb.first[d], gg[d]});
    }
    if (p == Pool::kAdaptive) return one(kernels::adaptive_avg_pool2d_backward(in[0], shape, slabs).to(dt));
    PoolArgs a = pool_args(c, p, dims);
    const Tensor like = Tensor::zeros({}, in[0].dtype()).expand(shape);  // the input's shape only
    return one(kernels::avg_pool_backward(in[0], like, dims, a.kernel, a.stride, a.padding, a.ceil_mode,
                                          a.count_include_pad, a.divisor, slabs)
                   .to(dt));
  }, /*data=*/{0});
  op.samples = [p, dims] {
    std::vector<Sample> s;
    if (p == Pool::kAdaptive) {
      s.push_back(sample({{3, 4, 4, 3}, {3, 4, 11, 7}}, {T(0), T(1)}));
      s.push_back(sample({{5, 2, 5}, {5, 9, 7}}, {T(0), T(1)}));
      return s;
    }
    // The first sample is small (the validator's search for missed rows enumerates it).
    std::vector<std::pair<Shape, PoolSample>> cases;
    Shape small{2, 3}, big{3, 4};
    for (int k = 0; k < dims; ++k) {
      small.push_back(k == 0 ? 5 : 4);
      big.push_back(k == 0 ? 11 : 7);
    }
    cases.push_back({small, {2, 2, 0, 1, false}});
    cases.push_back({big, {3, 2, 1, 1, true}});
    if (p == Pool::kMax) cases.push_back({big, {2, 1, 0, 2, false}});
    else cases.push_back({Shape(big.begin() + 1, big.end()), {2, 1, 1, 1, false}});
    for (size_t n = 0; n < cases.size(); ++n) {
      const auto& [x, q] = cases[n];
      const size_t lead = x.size() - dims;
      Shape g(x.begin(), x.begin() + lead);
      for (int64_t o : kernels::pool_output_size(Shape(x.begin() + lead, x.end()), {q.k}, {q.s}, {q.p}, {q.d}, q.ceil))
        g.push_back(o);
      std::vector<ArgValue> pos{T(0), T(1), L({q.k}), L({q.s}), L({q.p})};
      if (p == Pool::kAvg) {
        pos.push_back(V(q.ceil));
        pos.push_back(V(n != 1));                                // count_include_pad
        pos.push_back(n == 2 ? I(3) : V(IValue(std::monostate{})));  // divisor_override
        s.push_back(sample({g, x}, pos));
      } else {
        pos.push_back(L({q.d}));
        pos.push_back(V(q.ceil));
        pos.push_back(T(2));
        s.push_back(sample({g, x, g}, pos, {}, {DType::kFloat32, DType::kFloat32, DType::kInt64}));
      }
    }
    return s;
  };
  op.steps.push_back(halo_backward(p, dims));
  if (p == Pool::kMax) {
    // self: ties and NaNs from a fixed seed; indices: the forward's on that self.
    op.make_input = [dims](int i, const OpCall& c, uint64_t seed) {
      if (i == 0) return random_tensor(c.tensor(0).shape, c.tensor(0).dtype, seed);
      Tensor x = coarse_input(c.tensor(1), kFixedSeed, true);
      if (i == 1) return x;
      PoolArgs a = pool_args(c, Pool::kMax, dims);
      return kernels::max_pool_with_indices(x, dims, a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode).second;
    };
  }
}

// ---------------------------------------------------------------------------------------------
// value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim): tensors grad (0),
// indices (1).

void define_value_selecting_backward(Registry& reg) {
  OpDef& op = reg.define(
      "value_selecting_reduction_backward(Tensor grad, int dim, Tensor indices, int[] sizes, bool keepdim) -> Tensor",
      "backward");
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad");
    check_index(c, 1, "indices");
    Shape sizes;
    for (int64_t s : c.get_int_list("sizes")) {
      if (s < 0) fail(c, absl::StrCat("sizes has a negative size ", s));
      sizes.push_back(s);
    }
    const int64_t d = dim_arg(c, static_cast<int64_t>(sizes.size()));
    Shape reduced = sizes;
    if (!sizes.empty()) {
      if (c.get_bool("keepdim")) reduced[d] = 1;
      else reduced.erase(reduced.begin() + d);
    }
    check_shape(c, 0, "grad (the reduced shape)", reduced);
    check_shape(c, 1, "indices (the reduced shape)", reduced);
    return std::vector<TensorMeta>{{sizes, c.tensor(0).dtype}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return one(kernels::value_index_backward(in[0], in[1], ctx.out_block(0).first, c.get_int("dim"),
                                             c.get_bool("keepdim")));
  });
  op.samples = [] {
    const std::vector<DType> dt{DType::kFloat32, DType::kInt64};
    return std::vector<Sample>{sample({{7}, {7}}, {T(0), I(1), T(1), L({7, 5}), V(false)}, {}, dt),
                               sample({{4, 1, 3}, {4, 1, 3}}, {T(0), I(1), T(1), L({4, 9, 3}), V(true)}, {}, dt),
                               sample({{5, 3}, {5, 3}}, {T(0), I(-3), T(1), L({7, 5, 3}), V(false)}, {}, dt)};
  };
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 0) return random_tensor(c.tensor(0).shape, c.tensor(0).dtype, seed);
    const auto sizes = c.get_int_list("sizes");
    const int64_t d = wrap_dim(c.get_int("dim"), static_cast<int64_t>(sizes.size()), "dim");
    return index_input(c.tensor(1), sizes[d], seed);
  };
}

// ---------------------------------------------------------------------------------------------
// Scan backward ops: tensors grad (0), input (1), and indices / output / result (2).

enum class ScanGrad { kCumMaxMin, kCumProd, kLogCumSumExp };

void define_scan_backward(Registry& reg, ScanGrad s) {
  std::string schema;
  switch (s) {
    case ScanGrad::kCumMaxMin:
      schema = "cummaxmin_backward(Tensor grad, Tensor input, Tensor indices, int dim) -> Tensor";
      break;
    case ScanGrad::kCumProd:
      schema = "cumprod_backward(Tensor grad, Tensor input, int dim, Tensor output) -> Tensor";
      break;
    case ScanGrad::kLogCumSumExp:
      schema = "logcumsumexp_backward(Tensor grad, Tensor self, Tensor result, int dim) -> Tensor";
      break;
  }
  OpDef& op = reg.define(schema, "backward");
  op.meta = [s](const OpCall& c) {
    dim_arg(c, std::max<int64_t>(rank_of(c, 1), 1));
    check_floating(c, 0, "grad");
    const Shape& x = c.tensor(1).shape;
    check_shape(c, 0, "grad (the input's shape)", x);
    check_shape(c, 2, s == ScanGrad::kCumMaxMin ? "indices" : "the forward result", x);
    if (s == ScanGrad::kCumMaxMin) check_index(c, 2, "indices");
    else {
      check_floating(c, 1, "input");
      check_floating(c, 2, "the forward result");
    }
    DType dt = is_floating(c.tensor(1).dtype) ? c.tensor(1).dtype : c.tensor(0).dtype;
    return std::vector<TensorMeta>{{x, dt}};
  };
  op.kernel = guarded([s](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const int64_t d = c.get_int("dim");
    const DType dt = ctx.out_meta[0].dtype;
    switch (s) {
      case ScanGrad::kCumMaxMin: return one(kernels::cummaxmin_backward(in[0], in[2], in[1].sizes(), d).to(dt));
      case ScanGrad::kCumProd: return one(kernels::cumprod_backward(in[0], in[1], in[2], d).to(dt));
      case ScanGrad::kLogCumSumExp: return one(kernels::logcumsumexp_backward(in[0], in[1], in[2], d).to(dt));
    }
    return std::vector<Tensor>{};
  });
  op.samples = [s] {
    std::vector<DType> dt{DType::kFloat32, DType::kFloat32, s == ScanGrad::kCumMaxMin ? DType::kInt64 : DType::kFloat32};
    // cumprod_backward and logcumsumexp_backward take dim before / after the third tensor.
    auto args = [s](int64_t dim) {
      if (s == ScanGrad::kCumProd) return std::vector<ArgValue>{T(0), T(1), I(dim), T(2)};
      return std::vector<ArgValue>{T(0), T(1), T(2), I(dim)};
    };
    return std::vector<Sample>{sample({{7, 5}, {7, 5}, {7, 5}}, args(0), {}, dt),
                               sample({{4, 9}, {4, 9}, {4, 9}}, args(1), {}, dt),
                               sample({{3, 5, 4}, {3, 5, 4}, {3, 5, 4}}, args(-2), {}, dt)};
  };
  // input from a fixed seed, and the forward's result (or indices) on it.
  op.make_input = [s](int i, const OpCall& c, uint64_t seed) {
    if (i == 0) return random_tensor(c.tensor(0).shape, c.tensor(0).dtype, seed);
    const TensorMeta& m = c.tensor(1);
    const int64_t d = c.get_int("dim");
    Tensor x;
    switch (s) {
      case ScanGrad::kCumMaxMin: x = coarse_input(m, kFixedSeed, true); break;
      case ScanGrad::kCumProd: {  // values near 1 (and one exact zero) keep products accurate
        Tensor r = random_tensor(m.shape, DType::kFloat64, kFixedSeed);
        x = kernels::add(kernels::mul(r, Scalar(0.25)), Scalar(1.0));
        if (x.numel() > 3) x.contiguous().reshape({-1}).select(0, 3).fill_(0.0);
        x = x.to(m.dtype);
        break;
      }
      case ScanGrad::kLogCumSumExp: x = random_tensor(m.shape, m.dtype, kFixedSeed); break;
    }
    if (i == 1) return x;
    switch (s) {
      case ScanGrad::kCumMaxMin: return kernels::cummax(x, d).second;
      case ScanGrad::kCumProd: return kernels::cumprod(x, d);
      case ScanGrad::kLogCumSumExp: return kernels::logcumsumexp(x, d);
    }
    return x;
  };
}

}  // namespace

void define_backward_ops(Registry& reg) {
  define_gelu_backward(reg);
  define_embedding_dense_backward(reg);
  define_nll_loss_backward(reg);
  define_slice_select_backward(reg, false);
  define_slice_select_backward(reg, true);
  for (int dims : {1, 2, 3}) {
    define_pool_backward(reg, Pool::kAvg, dims);
    define_pool_backward(reg, Pool::kMax, dims);
  }
  define_pool_backward(reg, Pool::kAdaptive, 2);
  define_value_selecting_backward(reg);
  define_scan_backward(reg, ScanGrad::kCumMaxMin);
  define_scan_backward(reg, ScanGrad::kCumProd);
  define_scan_backward(reg, ScanGrad::kLogCumSumExp);
}

}  // namespace dtensor::ops
