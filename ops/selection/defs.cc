// Value-selecting reductions: max.dim, min.dim, argmax, argmin (with the candidate gather for a
// sharded reduced dim), median, nanmedian, kthvalue (kernels/cpu/selection.h has the semantics).
#include "kernels/cpu/selection.h"

#include "dtensor/partial_split.h"
#include "ops/common/steps.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

int64_t rank0(const OpCall& c) { return static_cast<int64_t>(c.tensor(0).shape.size()); }

int64_t sel_dim(const OpCall& c) {
  return guard(c, [&] { return wrap_dim(c.get_int("dim"), rank0(c), "dim"); });
}

bool keepdim(const OpCall& c) { return c.get_bool("keepdim"); }

Shape reduce_shape(const Shape& s, int64_t d, bool keep) {
  if (s.empty()) return s;  // a 0-d tensor reduces to itself (dim 0 or -1), as torch's does
  Shape out = s;
  if (keep) out[d] = 1;
  else out.erase(out.begin() + d);
  return out;
}

void check_nonempty(const OpCall& c, int64_t d) {
  if (c.tensor(0).shape.empty() ? false : c.tensor(0).shape[d] == 0)
    fail(c, "cannot reduce a dim of size 0 (no identity); accepted: a non-empty dim");
}

std::vector<Sample> dim_samples() {
  return {sample({{7, 5}}, {T(0), I(0)}), sample({{4, 9}}, {T(0), I(1), V(true)}),
          sample({{3, 5, 4}}, {T(0), I(-2)})};
}

Tensor ties_and_nans(int i, const OpCall& c, uint64_t seed) { return coarse_input(c.tensor(i), seed, true); }

// The candidate gather for max.dim/min.dim: this rank's (value, global index) per row, then the
// winners; the reduced dim is then dropped unless keepdim.
StepDef max_min_gather(bool is_max) {
  StepDef step;
  step.name = "candidate_gather";
  step.runs_on_device = true;  // kernels and collectives only; buffers on the input's device
  step.traffic = [](const OpCall& c, const Strategy& st, const std::vector<int>& dims) {
    Shape block = local_block(c.tensor(0).shape, st.inputs[0], c.mesh_shape(),
                              std::vector<int64_t>(c.mesh_shape().size(), 0)).first;
    int64_t rows = numel(reduce_shape(block, sel_dim(c), true));
    int64_t group = 1;
    for (int i : dims) group *= c.mesh_shape()[i];
    return StepTraffic{CommKind::kAllGather, comm_bytes_sent(CommKind::kAllGather, group * rows * (8 + 8), group),
                       static_cast<int>(dims.size())};
  };
  step.run = [is_max](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                      const std::vector<int>& dims, const DeviceMesh& mesh, Timeout timeout) {
    const int64_t d = sel_dim(c);
    const Tensor& x = in[0];
    const int64_t off = ctx.in_block(c, 0).second[d];
    Tensor v, i;
    if (x.size(d) > 0) {
      auto r = is_max ? kernels::max_dim(x, d, true) : kernels::min_dim(x, d, true);
      v = r.first;
      i = kernels::add(r.second, Scalar(off));
    } else {
      Shape s = reduce_shape(x.sizes(), d, true);
      v = Tensor::zeros(s, x.dtype(), x.device());
      i = Tensor::full(s, -1, DType::kInt64, x.device());
    }
    auto [bv, bi] = gather_candidates(v, i, is_max, dims, mesh, timeout);
    if (!keepdim(c)) {
      bv = bv.squeeze(d).contiguous();
      bi = bi.squeeze(d).contiguous();
    }
    return std::vector<Tensor>{bv, bi};
  };
  return step;
}

// argmax/argmin: with a dim like max.dim's indices; without, over the flattened tensor (the local
// flat index is mapped to the global one through the block's offset).
StepDef arg_gather(bool is_max) {
  StepDef step;
  step.name = "candidate_gather";
  // Kernels and collectives on the input's device; the whole-tensor case reads its one candidate
  // (two scalars) through device copies to map the local flat index to the global one.
  step.runs_on_device = true;
  step.traffic = [](const OpCall& c, const Strategy& st, const std::vector<int>& dims) {
    Shape block = local_block(c.tensor(0).shape, st.inputs[0], c.mesh_shape(),
                              std::vector<int64_t>(c.mesh_shape().size(), 0)).first;
    int64_t rows = c.has("dim") ? numel(reduce_shape(block, sel_dim(c), true)) : 1;
    int64_t group = 1;
    for (int i : dims) group *= c.mesh_shape()[i];
    return StepTraffic{CommKind::kAllGather, comm_bytes_sent(CommKind::kAllGather, group * rows * 16, group),
                       static_cast<int>(dims.size())};
  };
  step.run = [is_max](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                      const std::vector<int>& dims, const DeviceMesh& mesh, Timeout timeout) {
    const Tensor& x = in[0];
    auto [shape, offset] = ctx.in_block(c, 0);
    const Shape& global = c.tensor(0).shape;
    Tensor v, i;
    if (c.has("dim")) {
      const int64_t d = sel_dim(c);
      if (x.size(d) > 0) {
        auto r = is_max ? kernels::max_dim(x, d, true) : kernels::min_dim(x, d, true);
        v = r.first;
        i = kernels::add(r.second, Scalar(offset[d]));
      } else {
        Shape s = reduce_shape(x.sizes(), d, true);
        v = Tensor::zeros(s, x.dtype(), x.device());
        i = Tensor::full(s, -1, DType::kInt64, x.device());
      }
      auto [bv, bi] = gather_candidates(v, i, is_max, dims, mesh, timeout);
      return std::vector<Tensor>{keepdim(c) ? bi : bi.squeeze(d).contiguous()};
    }
    // Whole tensor: one candidate, its flat index in the global tensor.
    int64_t gidx = -1;
    double best = 0;
    if (x.numel() > 0) {
      int64_t local = static_cast<int64_t>(
          (is_max ? kernels::argmax(x) : kernels::argmin(x)).item());
      best = x.contiguous().reshape({-1}).select(0, local).item();
      gidx = 0;
      int64_t rem = local;
      Shape gstr = contiguous_strides(global);
      for (int64_t k = static_cast<int64_t>(shape.size()) - 1; k >= 0; --k) {
        gidx += (rem % shape[k] + offset[k]) * gstr[k];
        rem /= shape[k];
      }
    }
    auto [bv, bi] = gather_candidates(Tensor::full({}, best, DType::kFloat64, x.device()),
                                      Tensor::full({}, gidx, DType::kInt64, x.device()), is_max, dims, mesh, timeout);
    Shape out = keepdim(c) ? Shape(global.size(), 1) : Shape{};
    return std::vector<Tensor>{bi.reshape(out)};
  };
  return step;
}

void define_max_min(Registry& reg, bool is_max) {
  std::string name = is_max ? "max.dim" : "min.dim";
  OpDef& op = reg.define(name + "(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
                         "selection");
  op.cost = cost(CostClass::kOnePass);
  op.meta = [](const OpCall& c) {
    int64_t d = sel_dim(c);
    check_nonempty(c, d);
    Shape s = reduce_shape(c.tensor(0).shape, d, keepdim(c));
    return std::vector<TensorMeta>{{s, c.tensor(0).dtype}, {s, DType::kInt64}};
  };
  op.kernel = [is_max](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    auto r = is_max ? kernels::max_dim(in[0], sel_dim(c), keepdim(c)) : kernels::min_dim(in[0], sel_dim(c), keepdim(c));
    return std::vector<Tensor>{r.first, r.second};
  };
  op.samples = dim_samples;
  op.make_input = ties_and_nans;
  op.steps.push_back(max_min_gather(is_max));
}

void define_arg(Registry& reg, bool is_max) {
  std::string name = is_max ? "argmax" : "argmin";
  OpDef& op = reg.define(name + "(Tensor self, int? dim=None, bool keepdim=False) -> Tensor", "selection");
  op.cost = cost(CostClass::kOnePass);
  op.meta = [](const OpCall& c) {
    if (!c.has("dim")) {
      if (numel(c.tensor(0).shape) == 0) fail(c, "argmax/argmin of an empty tensor");
      return std::vector<TensorMeta>{{keepdim(c) ? Shape(c.tensor(0).shape.size(), 1) : Shape{}, DType::kInt64}};
    }
    int64_t d = sel_dim(c);
    check_nonempty(c, d);
    return std::vector<TensorMeta>{{reduce_shape(c.tensor(0).shape, d, keepdim(c)), DType::kInt64}};
  };
  op.kernel = [is_max](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    std::optional<int64_t> d;
    if (c.has("dim")) d = c.get_int("dim");
    return std::vector<Tensor>{is_max ? kernels::argmax(in[0], d, keepdim(c)) : kernels::argmin(in[0], d, keepdim(c))};
  };
  op.samples = [] {
    return std::vector<Sample>{sample({{7, 5}}, {T(0), I(0)}), sample({{4, 9}}, {T(0)}),
                               sample({{3, 5, 4}}, {T(0)}, {{"keepdim", V(true)}})};
  };
  op.make_input = ties_and_nans;
  op.steps.push_back(arg_gather(is_max));
}

void define_medians(Registry& reg) {
  for (bool nan : {false, true}) {
    std::string base = nan ? "nanmedian" : "median";
    OpDef& whole = reg.define(base + "(Tensor self) -> Tensor", "selection");
    whole.cost = cost(CostClass::kOnePass);
    whole.meta = [](const OpCall& c) { return std::vector<TensorMeta>{{Shape{}, c.tensor(0).dtype}}; };
    whole.kernel = [nan](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
      return std::vector<Tensor>{nan ? kernels::nanmedian(in[0]) : kernels::median(in[0])};
    };
    whole.samples = [] { return std::vector<Sample>{sample({{7, 5}}, {T(0)}), sample({{6}}, {T(0)})}; };
    whole.make_input = ties_and_nans;
    OpDef& dim = reg.define(base + ".dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
                            "selection");
    dim.cost = cost(CostClass::kOnePass);
    dim.meta = [](const OpCall& c) {
      int64_t d = sel_dim(c);
      check_nonempty(c, d);
      Shape s = reduce_shape(c.tensor(0).shape, d, keepdim(c));
      return std::vector<TensorMeta>{{s, c.tensor(0).dtype}, {s, DType::kInt64}};
    };
    dim.kernel = [nan](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      auto r = nan ? kernels::nanmedian_dim(in[0], sel_dim(c), keepdim(c)) : kernels::median_dim(in[0], sel_dim(c), keepdim(c));
      return std::vector<Tensor>{r.first, r.second};
    };
    dim.samples = dim_samples;
    dim.make_input = ties_and_nans;
  }
  OpDef& kth = reg.define(
      "kthvalue(Tensor self, int k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)", "selection");
  kth.cost = cost(CostClass::kOnePass);
  kth.meta = [](const OpCall& c) {
    int64_t d = sel_dim(c);
    int64_t n = c.tensor(0).shape.empty() ? 1 : c.tensor(0).shape[d];
    int64_t k = c.get_int("k");
    if (k < 1 || k > n) fail(c, absl::StrCat("k must be in [1, ", n, "], got ", k));
    Shape s = reduce_shape(c.tensor(0).shape, d, keepdim(c));
    return std::vector<TensorMeta>{{s, c.tensor(0).dtype}, {s, DType::kInt64}};
  };
  kth.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    auto r = kernels::kthvalue(in[0], c.get_int("k"), sel_dim(c), keepdim(c));
    return std::vector<Tensor>{r.first, r.second};
  };
  kth.samples = [] {
    return std::vector<Sample>{sample({{7, 5}}, {T(0), I(3), I(0)}), sample({{4, 9}}, {T(0), I(9), I(1), V(true)})};
  };
  kth.make_input = ties_and_nans;
}

}  // namespace

void define_selection_ops(Registry& reg) {
  define_max_min(reg, true);
  define_max_min(reg, false);
  define_arg(reg, true);
  define_arg(reg, false);
  define_medians(reg);
}

DTENSOR_FAMILY_PART("selection", kDefinitions, define_selection_ops);

}  // namespace dtensor::ops
