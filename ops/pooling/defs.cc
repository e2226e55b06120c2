// Pooling: avg_pool1d/2d/3d, max_pool1d/2d/3d_with_indices, adaptive_avg_pool1d/2d/3d (kernels/cpu/pooling.h
// has the semantics), and the halo exchange that keeps spatial dims sharded. Their backward ops:
// pooling_backward_ops.cc.
#include "kernels/cpu/pooling.h"

#include "ops/common/steps.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

enum class Pool { kAvg, kMax, kAdaptive };

struct Params {
  int dims = 2;
  std::vector<int64_t> kernel, stride, padding, dilation, output_size;
  bool ceil_mode = false, count_include_pad = true;
  std::optional<int64_t> divisor;
};

// One value per spatial dim (a single value broadcasts; an empty stride means the kernel size).
std::vector<int64_t> per_dim(std::vector<int64_t> v, int dims, std::vector<int64_t> fallback) {
  if (v.empty()) v = std::move(fallback);
  if (v.size() == 1) v.assign(dims, v[0]);
  return v;
}

Params params(const OpCall& c, Pool p, int dims) {
  Params q;
  q.dims = dims;
  if (p == Pool::kAdaptive) {
    q.output_size = per_dim(c.get_int_list("output_size"), dims, {});
    return q;
  }
  q.kernel = per_dim(c.get_int_list("kernel_size"), dims, {});
  q.stride = per_dim(c.get_int_list("stride"), dims, q.kernel);
  q.padding = per_dim(c.get_int_list("padding"), dims, {0});
  q.dilation = per_dim(p == Pool::kMax ? c.get_int_list("dilation") : std::vector<int64_t>{}, dims, {1});
  q.ceil_mode = c.get_bool("ceil_mode");
  if (p == Pool::kAvg) {
    q.count_include_pad = c.get_bool("count_include_pad");
    q.divisor = c.get_opt_int("divisor_override");
  }
  return q;
}

// Output shape, with the kernel's own checks turned into errors that name the call.
Shape out_shape(const OpCall& c, Pool p, const Params& q) {
  const Shape& x = c.tensor(0).shape;
  if (x.size() != static_cast<size_t>(q.dims + 1) && x.size() != static_cast<size_t>(q.dims + 2))
    fail(c, absl::StrCat("input must be [N, C, spatial...] or [C, spatial...] with ", q.dims, " spatial dims"));
  if (!is_floating(c.tensor(0).dtype)) fail(c, "pooling needs a floating dtype");
  const size_t lead = x.size() - q.dims;
  Shape out(x.begin(), x.begin() + lead);
  if (p == Pool::kAdaptive) {
    if (q.output_size.size() != static_cast<size_t>(q.dims)) fail(c, "output_size needs one value per spatial dim");
    for (int64_t o : q.output_size) {
      if (o < 0) fail(c, absl::StrCat("output_size has ", o, "; accepted: sizes >= 0"));
      out.push_back(o);
    }
    guard(c, [&] { return numel(out); });  // the element count must fit int64
    return out;
  }
  Shape spatial(x.begin() + lead, x.end());
  auto o = guard(c, [&] {
    return kernels::pool_output_size(spatial, q.kernel, q.stride, q.padding, q.dilation, q.ceil_mode);
  });
  for (int64_t v : o) {
    if (v < 1) fail(c, "the output would be empty; accepted: kernel no larger than the padded input");
    out.push_back(v);
  }
  return out;
}

// Empty outputs of this rank's output block shapes (an empty shard of a batch or channel dim).
std::vector<Tensor> empty_outputs(Pool p, const LocalContext& ctx, Device device) {
  std::vector<Tensor> out{Tensor::empty(ctx.out_block(0).first, ctx.out_meta[0].dtype, device)};
  if (p == Pool::kMax) out.push_back(Tensor::empty(ctx.out_block(1).first, DType::kInt64, device));
  return out;
}

std::vector<Tensor> run_pool(Pool p, const Tensor& x, const Params& q, const std::vector<kernels::PoolSlab>& slabs) {
  switch (p) {
    case Pool::kAvg:
      return {kernels::avg_pool(x, q.dims, q.kernel, q.stride, q.padding, q.ceil_mode, q.count_include_pad,
                                q.divisor, slabs)};
    case Pool::kMax: {
      auto [v, i] = kernels::max_pool_with_indices(x, q.dims, q.kernel, q.stride, q.padding, q.dilation,
                                                   q.ceil_mode, slabs);
      return {v, i};
    }
    case Pool::kAdaptive: return {kernels::adaptive_avg_pool(x, q.dims, q.output_size, slabs)};
  }
  return {};
}

// Input rows [lo, hi) that output rows [olo, ohi) of spatial dim k read.
std::pair<int64_t, int64_t> needed_rows(Pool p, const Params& q, int k, int64_t olo, int64_t ohi, int64_t in,
                                        int64_t out) {
  if (olo >= ohi) return {0, 0};
  if (p == Pool::kAdaptive) return kernels::adaptive_pool_input_range(olo, ohi, in, out);
  return kernels::pool_input_range(olo, ohi, in, q.kernel[k], q.stride[k], q.padding[k], q.dilation[k]);
}

// For each sharded spatial dim: the mesh dim sharding it (validated: one per spatial dim).
std::vector<std::pair<int, int>> sharded_spatial(const OpCall& c, const Strategy& st, int dims,
                                                 const std::vector<int>& mesh_dims) {
  const int lead = static_cast<int>(c.tensor(0).shape.size()) - dims;
  std::vector<std::pair<int, int>> out;  // (spatial dim k, mesh dim)
  for (int md : mesh_dims) out.push_back({st.inputs[0][md].dim - lead, md});
  return out;
}

StepDef halo_exchange(Pool p, int dims) {
  StepDef step;
  step.name = "halo_exchange";
  // Narrows, cat and send/recv on the input's device; the pooling of the slab is a kernel (on CUDA
  // its slab form still runs on host copies, counted under the kernel's name).
  step.runs_on_device = true;
  // Each spatial dim is sharded by at most one mesh dim (nested chunks of one dim are not handled).
  step.valid = [dims](const OpCall& c, const Strategy& st) {
    const int lead = static_cast<int>(c.tensor(0).shape.size()) - dims;
    std::vector<int> count(c.tensor(0).shape.size(), 0);
    for (const Placement& x : st.inputs[0])
      if (x.is_shard() && ++count[x.dim] > 1 && x.dim >= lead) return false;
    return true;
  };
  step.traffic = [p, dims](const OpCall& c, const Strategy& st, const std::vector<int>& mesh_dims) {
    Params q = params(c, p, dims);
    const Shape& x = c.tensor(0).shape;
    Shape out = c.op().meta(c)[0].shape;
    const int lead = static_cast<int>(x.size()) - dims;
    // Average bytes a rank sends: rows others need from it, times the bytes of one local row (the
    // block at coordinate 0 along the other dims).
    Shape block = local_block(x, st.inputs[0], c.mesh_shape(), std::vector<int64_t>(c.mesh_shape().size(), 0)).first;
    int64_t bytes = 0;
    for (auto [k, md] : sharded_spatial(c, st, dims, mesh_dims)) {
      const int64_t n = c.mesh_shape()[md], L = x[lead + k], O = out[lead + k];
      const int64_t bl = std::max<int64_t>(block[lead + k], 1);
      const int64_t row = numel(block) / bl * static_cast<int64_t>(itemsize(c.tensor(0).dtype));
      const int64_t rows = halo_rows_sent(
          n, L, O, [&, k = k](int64_t olo, int64_t ohi) { return needed_rows(p, q, k, olo, ohi, L, O); });
      bytes += rows * row / n;
    }
    return StepTraffic{CommKind::kSendRecv, bytes, 1};
  };
  step.run = [p, dims](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                       const std::vector<int>& mesh_dims, const DeviceMesh& mesh, Timeout timeout) {
    Params q = params(c, p, dims);
    const Shape& gx = c.tensor(0).shape;
    const Shape& gout = ctx.out_meta[0].shape;
    const int lead = static_cast<int>(gx.size()) - dims;
    Tensor slab = in[0];
    std::vector<kernels::PoolSlab> slabs;
    for (auto [k, md] : sharded_spatial(c, *ctx.strategy, dims, mesh_dims)) {
      const int td = lead + k;
      ProcessGroup& g = mesh.group(md);
      const int n = g.size(), me = g.rank();
      const int64_t L = gx[td], O = gout[td];
      auto own = [&](int r) { auto [lo, len] = chunk_range(L, n, r); return std::pair{lo, lo + len}; };
      auto need = [&](int r) { auto [lo, len] = chunk_range(O, n, r); return needed_rows(p, q, k, lo, lo + len, L, O); };
      auto [mlo, mhi] = own(me);
      auto [nlo, nhi] = need(me);
      std::vector<P2POp> ops;
      std::vector<Tensor> pieces(n);
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        auto [rlo, rhi] = need(r);  // what r needs from me
        int64_t a = std::max(rlo, mlo), b = std::min(rhi, mhi);
        if (a < b) ops.push_back({P2POp::kSend, slab.narrow(td, a - mlo, b - a).contiguous(), r, 0});
        auto [olo, ohi] = own(r);  // what I need from r
        int64_t a2 = std::max(nlo, olo), b2 = std::min(nhi, ohi);
        if (a2 < b2) {
          Shape s = slab.sizes();
          s[td] = b2 - a2;
          pieces[r] = Tensor::empty(s, slab.dtype(), slab.device());
          ops.push_back({P2POp::kRecv, pieces[r], r, 0});
        }
      }
      if (!ops.empty()) g.batch_isend_irecv(ops, timeout);
      int64_t a = std::max(nlo, mlo), b = std::min(nhi, mhi);
      if (a < b) pieces[me] = slab.narrow(td, a - mlo, b - a);
      std::vector<Tensor> parts;
      for (auto& t : pieces)
        if (t.defined()) parts.push_back(t);
      int64_t start = nlo;
      if (parts.empty()) {
        Shape s = slab.sizes();
        s[td] = 0;
        slab = Tensor::empty(s, slab.dtype(), slab.device());
        start = 0;
      } else {
        slab = cat(parts, td);
      }
      auto [olo, olen] = chunk_range(O, n, me);
      slabs.push_back({k, L, start, olo, olo + olen, O});
    }
    bool empty_out = false;
    for (const auto& sl : slabs) empty_out |= sl.output_start >= sl.output_end;
    if (slab.numel() == 0 || empty_out) return empty_outputs(p, ctx, slab.device());
    return run_pool(p, slab, q, slabs);
  };
  return step;
}

void define_pool(Registry& reg, Pool p, int dims) {
  std::string name, args;
  std::string d = std::to_string(dims);
  if (p == Pool::kAvg) {
    name = "avg_pool" + d + "d";
    args = "int[" + d + "] kernel_size, int[" + d + "] stride=[], int[" + d +
           "] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None";
  } else if (p == Pool::kMax) {
    name = "max_pool" + d + "d_with_indices";
    args = "int[" + d + "] kernel_size, int[" + d + "] stride=[], int[" + d + "] padding=0, int[" + d +
           "] dilation=1, bool ceil_mode=False";
  } else {
    name = "adaptive_avg_pool" + d + "d";
    args = "int[" + d + "] output_size";
  }
  std::string ret = p == Pool::kMax ? "(Tensor values, Tensor indices)" : "Tensor";
  OpDef& op = reg.define(name + "(Tensor self, " + args + ") -> " + ret, "pooling");
  op.cost = cost(CostClass::kWindow, p == Pool::kMax ? Keeps::kInputsAndOutput : Keeps::kInputs);
  op.aten.layout_dependent = true;  // empty blocks: ATen refuses 0 channels; the window reads global offsets
  // adaptive_avg_pool2d/3d are CompositeImplicit in ATen: dispatch sees _adaptive_avg_pool2d/3d;
  // adaptive_avg_pool1d runs as the 2-d op there (a [N, C, 1, L] view).
  if (p == Pool::kAdaptive && dims > 1) op.aten.aliases = {{"_" + name, ""}};
  op.meta = [p, dims](const OpCall& c) {
    Shape out = out_shape(c, p, params(c, p, dims));
    std::vector<TensorMeta> m{{out, c.tensor(0).dtype}};
    if (p == Pool::kMax) m.push_back({out, DType::kInt64});
    return m;
  };
  op.kernel = [p, dims](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    if (in[0].numel() == 0 && !ctx.single_device()) return empty_outputs(p, ctx, in[0].device());
    return run_pool(p, in[0], params(c, p, dims), {});
  };
  op.samples = [p, dims] {
    Shape x{3, 4};
    for (int k = 0; k < dims; ++k) x.push_back(k == 0 ? 11 : 7);
    std::vector<Sample> s;
    if (p == Pool::kAdaptive) {
      const std::vector<int64_t> out = {4, 3, 2};  // 11 -> 4, 7 -> 3, 7 -> 2: overlapping windows
      s.push_back(sample({x}, {T(0), L(std::vector<int64_t>(out.begin(), out.begin() + dims))}));
      return s;
    }
    s.push_back(sample({x}, {T(0), L({2}), L({2})}));
    if (p == Pool::kAvg) {
      s.push_back(sample({x}, {T(0), L({3}), L({2}), L({1})}, {{"ceil_mode", V(true)}, {"count_include_pad", V(false)}}));
    } else {
      s.push_back(sample({x}, {T(0), L({3}), L({2}), L({1})}, {{"ceil_mode", V(true)}}));
      s.push_back(sample({x}, {T(0), L({2}), L({1}), L({0}), L({2})}));
    }
    return s;
  };
  if (p == Pool::kMax) op.make_input = [](int i, const OpCall& c, uint64_t seed) { return coarse_input(c.tensor(i), seed, true); };
  op.steps.push_back(halo_exchange(p, dims));
}

}  // namespace

void define_pooling_ops(Registry& reg) {
  for (int dims : {1, 2, 3}) {
    define_pool(reg, Pool::kAvg, dims);
    define_pool(reg, Pool::kMax, dims);
  }
  for (int dims : {1, 2, 3}) define_pool(reg, Pool::kAdaptive, dims);
}

DTENSOR_FAMILY_PART("pooling", kDefinitions, define_pooling_ops);

}  // namespace dtensor::ops
