// Scans along a dim: cumsum, cumprod, logcumsumexp, cummax, cummin (kernels/cpu/scan.h holds the
// single-device semantics, NaN and tie rules) and the carry exchange that keeps the scanned dim
// sharded.
#include "kernels/cpu/scan.h"

#include <cmath>
#include <limits>

#include "dtensor/partial_split.h"
#include "ops/common/steps.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

enum class Scan { kSum, kProd, kLogSumExp, kMax, kMin };

int64_t scan_dim(const OpCall& c) {
  return guard(c, [&] { return wrap_dim(c.get_int("dim"), static_cast<int64_t>(c.tensor(0).shape.size()), "dim"); });
}

bool two_outputs(Scan s) { return s == Scan::kMax || s == Scan::kMin; }

bool takes_dtype(Scan s) { return s == Scan::kSum || s == Scan::kProd; }

// The scanned input: cast to the call's dtype when it has one (cumsum's and cumprod's dtype).
Tensor scan_input(Scan s, const Tensor& x, const OpCall& c) {
  return takes_dtype(s) && c.has("dtype") ? x.to(dtype_from_name(c.get_str("dtype"))) : x;
}

std::vector<Tensor> local_scan(Scan s, const Tensor& x, int64_t d) {
  switch (s) {
    case Scan::kSum: return {kernels::cumsum(x, d)};
    case Scan::kProd: return {kernels::cumprod(x, d)};
    case Scan::kLogSumExp: return {kernels::logcumsumexp(x, d)};
    case Scan::kMax: {
      auto [v, i] = kernels::cummax(x, d);
      return {v, i};
    }
    case Scan::kMin: {
      auto [v, i] = kernels::cummin(x, d);
      return {v, i};
    }
  }
  return {};
}

// The neutral carry of a scan: the running value before the first element.
double neutral(Scan s) {
  switch (s) {
    case Scan::kSum: return 0.0;
    case Scan::kProd: return 1.0;
    case Scan::kLogSumExp:
    case Scan::kMax: return -std::numeric_limits<double>::infinity();
    case Scan::kMin: return std::numeric_limits<double>::infinity();
  }
  return 0.0;
}

std::vector<Tensor> scan_with_carry(Scan s, const Tensor& x, int64_t d, const Tensor& cv, const Tensor& ci,
                                    int64_t offset) {
  switch (s) {
    case Scan::kSum: return {kernels::cumsum_with_carry(x, d, cv)};
    case Scan::kProd: return {kernels::cumprod_with_carry(x, d, cv)};
    case Scan::kLogSumExp: return {kernels::logcumsumexp_with_carry(x, d, cv)};
    case Scan::kMax: {
      auto [v, i] = kernels::cummax_with_carry(x, d, cv, ci, offset);
      return {v, i};
    }
    case Scan::kMin: {
      auto [v, i] = kernels::cummin_with_carry(x, d, cv, ci, offset);
      return {v, i};
    }
  }
  return {};
}

// Bytes of one rank's carry slab: the input without the scanned dim, in the output dtype (plus an
// int64 index for cummax/cummin).
int64_t slab_bytes(Scan s, const OpCall& c, const std::vector<TensorMeta>& meta, const Shape& block) {
  int64_t d = scan_dim(c);
  int64_t n = block[d] == 0 ? 0 : numel(block) / block[d];
  int64_t b = n * static_cast<int64_t>(itemsize(meta[0].dtype));
  if (two_outputs(s)) b += n * 8;
  return b;
}

// (cv, ci) <- the running (value, index) after one more element (v, i) with a global index, by the
// single-device rule (cummax/cummin_with_carry's: the element replaces the running pair when it is
// NaN, or when the running value is not NaN and v >= cv (cummax) / v <= cv (cummin)). Index -1
// marks an empty shard's slab, which changes nothing. Kernels only, so it runs where the tensors
// are. v, i, cv, ci: one slab each (size 1 along d).
void combine_extreme(bool is_max, int64_t d, Tensor& cv, Tensor& ci, const Tensor& v, const Tensor& i) {
  // The carried scan of the one element v; its index is kTaken where v wins (local index 0 + kTaken).
  constexpr int64_t kTaken = -2;  // neither a global index nor the empty marker -1
  auto [nv, ni] = is_max ? kernels::cummax_with_carry(v, d, cv, ci, kTaken)
                         : kernels::cummin_with_carry(v, d, cv, ci, kTaken);
  const Tensor empty = kernels::lt(i, Scalar(0));
  cv = kernels::where(empty, cv, nv);
  ci = kernels::where(empty, ci, kernels::where(kernels::eq(ni, Scalar(kTaken)), i, ni));
}

StepDef carry_exchange(Scan s) {
  StepDef step;
  step.name = "carry_exchange";
  step.one_mesh_dim = true;
  step.runs_on_device = true;  // kernels and collectives only; buffers on the input's device
  step.traffic = [s](const OpCall& c, const Strategy& st, const std::vector<int>& dims) {
    auto meta = c.op().meta(c);
    Shape block = local_block(c.tensor(0).shape, st.inputs[0], c.mesh_shape(),
                              std::vector<int64_t>(c.mesh_shape().size(), 0)).first;
    const int64_t k = c.mesh_shape()[dims[0]];
    return StepTraffic{CommKind::kAllGather, comm_bytes_sent(CommKind::kAllGather, k * slab_bytes(s, c, meta, block), k),
                       1};
  };
  step.run = [s](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                 const std::vector<int>& dims, const DeviceMesh& mesh, Timeout timeout) {
    const int64_t d = scan_dim(c);
    const Tensor x = scan_input(s, in[0], c);
    const Device dev = x.device();
    ProcessGroup& g = mesh.group(dims[0]);
    const int k = g.size();
    const int64_t offset = ctx.in_block(c, 0).second[d];
    // This shard's own scan, and its last element along d (the neutral carry when empty).
    std::vector<Tensor> own = local_scan(s, x, d);
    Shape slab_shape = x.sizes();
    slab_shape[d] = 1;
    Tensor last_v, last_i;
    if (x.size(d) > 0) {
      last_v = own[0].narrow(d, x.size(d) - 1, 1).contiguous();
      if (two_outputs(s)) last_i = kernels::add(own[1].narrow(d, x.size(d) - 1, 1), Scalar(offset));
    } else {
      last_v = Tensor::full(slab_shape, neutral(s), own[0].dtype(), dev);
      if (two_outputs(s)) last_i = Tensor::full(slab_shape, -1, DType::kInt64, dev);
    }
    const int64_t slab = numel(slab_shape);
    Tensor all_v = Tensor::empty({k * slab}, last_v.dtype(), dev);
    g.all_gather(last_v.reshape({slab}), all_v, std::vector<int64_t>(k, slab), timeout);
    Tensor all_i;
    if (two_outputs(s)) {
      all_i = Tensor::empty({k * slab}, DType::kInt64, dev);
      g.all_gather(last_i.contiguous().reshape({slab}), all_i, std::vector<int64_t>(k, slab), timeout);
    }
    // The carry into this shard: the earlier shards' last elements scanned in rank order.
    Tensor cv = Tensor::full(slab_shape, neutral(s), own[0].dtype(), dev);
    Tensor ci = Tensor::full(slab_shape, -1, DType::kInt64, dev);
    const int me = g.rank();
    for (int r = 0; r < me; ++r) {
      Tensor v = all_v.narrow(0, r * slab, slab).view(slab_shape);
      if (!two_outputs(s)) {
        cv = scan_with_carry(s, v, d, cv, ci, 0)[0];  // a carried scan of shard r's last element
        continue;
      }
      combine_extreme(s == Scan::kMax, d, cv, ci, v, all_i.narrow(0, r * slab, slab).view(slab_shape));
    }
    if (me == 0) return own.size() == 2 ? std::vector<Tensor>{own[0], kernels::add(own[1], Scalar(offset))} : own;
    return scan_with_carry(s, x, d, cv, ci, offset);
  };
  return step;
}

void define(Registry& reg, const std::string& name, Scan s) {
  std::string sig = two_outputs(s) ? " -> (Tensor values, Tensor indices)" : " -> Tensor";
  // cumsum's and cumprod's dtype: the input is cast to it first, as ATen's.
  OpDef& op = reg.define(name + (takes_dtype(s) ? "(Tensor self, int dim, *, ScalarType? dtype=None)" : "(Tensor self, int dim)") + sig,
                         "scan");
  op.cost = cost(CostClass::kOnePass);
  op.meta = [s](const OpCall& c) {
    scan_dim(c);
    DType dt = c.tensor(0).dtype;
    if (s == Scan::kLogSumExp && !is_floating(dt)) fail(c, "logcumsumexp needs a floating dtype");
    if ((s == Scan::kSum || s == Scan::kProd) && !is_floating(dt)) dt = DType::kInt64;
    if (takes_dtype(s) && c.has("dtype")) dt = guard(c, [&] { return dtype_from_name(c.get_str("dtype")); });
    std::vector<TensorMeta> out{{c.tensor(0).shape, dt}};
    if (two_outputs(s)) out.push_back({c.tensor(0).shape, DType::kInt64});
    return out;
  };
  op.kernel = [s](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    return local_scan(s, scan_input(s, in[0], c), scan_dim(c));
  };
  op.samples = [s] {
    std::vector<Sample> v{sample({{7, 5}}, {T(0), I(0)}), sample({{4, 9}}, {T(0), I(1)}),
                          sample({{3, 5, 4}}, {T(0), I(-2)})};
    if (takes_dtype(s)) v.push_back(sample({{6, 4}}, {T(0), I(0)}, {{"dtype", V(std::string("float64"))}}));
    return v;
  };
  if (s == Scan::kProd)
    op.make_input = [](int i, const OpCall& c, uint64_t seed) {
      // Values near 1 keep products of long rows finite and accurate.
      Tensor r = random_tensor(c.tensor(i).shape, DType::kFloat64, seed);
      return kernels::add(kernels::mul(r, Scalar(0.25)), Scalar(1.0)).to(c.tensor(i).dtype);
    };
  if (s == Scan::kMax || s == Scan::kMin)
    op.make_input = [](int i, const OpCall& c, uint64_t seed) { return coarse_input(c.tensor(i), seed, true); };
  op.steps.push_back(carry_exchange(s));
}

}  // namespace

void define_scan_ops(Registry& reg) {
  define(reg, "cumsum", Scan::kSum);
  define(reg, "cumprod", Scan::kProd);
  define(reg, "logcumsumexp", Scan::kLogSumExp);
  define(reg, "cummax", Scan::kMax);
  define(reg, "cummin", Scan::kMin);
}

DTENSOR_FAMILY_PART("scan", kDefinitions, define_scan_ops);

}  // namespace dtensor::ops
