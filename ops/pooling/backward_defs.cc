// Backward ops of the pooling family that autograd/ calls by their ATen names:
// avg_pool{1,2,3}d_backward, max_pool{1,2,3}d_with_indices_backward and
// adaptive_avg_pool{1,2,3}d_backward.
// Rules: ops/pooling/rules.cc; shared helpers: ops/common/backward_defs.h.
#include "kernels/cpu/pooling.h"

#include "dtensor/partial_split.h"
#include "ops/common/backward_defs.h"
#include "ops/common/steps.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

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
      const int64_t rows =
          halo_rows_sent(n, L, O, [&](int64_t olo, int64_t ohi) { return needed_rows(p, a, k, olo, ohi, L, O); });
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
          case Pool::kAdaptive: return kernels::adaptive_avg_pool_backward(grad, slab_shape, dims, slabs);
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
  OpDef& op = reg.define(schema, "pooling");
  op.cost = cost(CostClass::kWindow, Keeps::kNothing);
  op.aten.layout_dependent = true;  // empty blocks and global window offsets, as the forward
  if (p == Pool::kAdaptive && dims > 1) op.aten.aliases = {{"_" + pool_name(p, dims), ""}};
  else if (dims == 1)
    op.aten.not_aten = "ATen runs 1-d pooling as 2-d (no 1-d backward op); dtensor's own backward";
  op.no_backward = kNoDoubleBackward;
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
    if (p == Pool::kAdaptive) return one(kernels::adaptive_avg_pool_backward(in[0], shape, dims, slabs).to(dt));
    PoolArgs a = pool_args(c, p, dims);
    const Tensor like = Tensor::zeros({}, in[0].dtype()).expand(shape);  // the input's shape only
    return one(kernels::avg_pool_backward(in[0], like, dims, a.kernel, a.stride, a.padding, a.ceil_mode,
                                          a.count_include_pad, a.divisor, slabs)
                   .to(dt));
  }, /*data=*/{0});
  op.samples = [p, dims] {
    std::vector<Sample> s;
    if (p == Pool::kAdaptive) {
      // grad [lead..., out...] for self [lead..., in...]: 11 -> 4, 7 -> 3, 7 -> 2; 9 -> 2, 7 -> 5, 6 -> 4.
      const Shape in1 = {11, 7, 7}, out1 = {4, 3, 2}, in2 = {9, 7, 6}, out2 = {2, 5, 4};
      Shape g1 = {3, 4}, x1 = {3, 4}, g2 = {5}, x2 = {5};
      g1.insert(g1.end(), out1.begin(), out1.begin() + dims), x1.insert(x1.end(), in1.begin(), in1.begin() + dims);
      g2.insert(g2.end(), out2.begin(), out2.begin() + dims), x2.insert(x2.end(), in2.begin(), in2.begin() + dims);
      s.push_back(sample({g1, x1}, {T(0), T(1)}));
      s.push_back(sample({g2, x2}, {T(0), T(1)}));
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
      Tensor x = coarse_input(c.tensor(1), kBackwardFixedSeed, true);
      if (i == 1) return x;
      PoolArgs a = pool_args(c, Pool::kMax, dims);
      return kernels::max_pool_with_indices(x, dims, a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode).second;
    };
  }
}

}  // namespace

void define_pooling_backward_ops(Registry& reg) {
  for (int dims : {1, 2, 3}) {
    define_pool_backward(reg, Pool::kAvg, dims);
    define_pool_backward(reg, Pool::kMax, dims);
  }
  for (int dims : {1, 2, 3}) define_pool_backward(reg, Pool::kAdaptive, dims);
}

DTENSOR_FAMILY_PART("pooling", kDefinitions, define_pooling_backward_ops);

}  // namespace dtensor::ops
