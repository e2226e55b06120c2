// The planned family: ops the model zoo and imported models need that the engine cannot run yet:
// schema, output metadata, cost and single-mesh-dim rules (rules.cc), no kernel, so `dtensor plan`
// and `explain` (without "run") take them and every runtime path refuses them (OpDef::kernel is
// empty: dispatch names the op; the bridge and dtensor.ops list only ops with a kernel). An engine
// family that later defines one of these names takes it over: remove it here.
//
//   batch_norm(input[N, C, ...], weight[C]?, bias[C]?, training, momentum, eps) -> like input
//     rows: channels [S(1); S(1), S(0), S(0)]; batch or spatial dim d [S(d); S(d), R, R], which in
//     training carries the step "sync_stats" (SyncBatchNorm: an all_reduce of the per-channel sum and
//     sum of squares, 2*C float32 values).
//   moe_dispatch(self[T, H], probs[T, E], top_k, capacity_factor) -> [E, C, H]
//     C = ceil(top_k * T * capacity_factor / E); expert e's buffer holds its routed tokens, slots
//     allocated per token group (GShard's group-local capacity), so a token shard owns a slot shard.
//     rows: tokens [S(1); S(0), S(0)] (even splits); hidden [S(2); S(1), R];
//           experts [S(0); R, R]; Partial [P; P, R].
//   moe_combine(self[E, C, H], probs[T, E], top_k) -> [T, H]: the weighted sum over each token's
//     experts. rows: tokens [S(0); S(1), S(0)] (even); hidden [S(1); S(2), R];
//           experts [P; S(0), R] (each rank adds its experts' share); Partial [P; P, R].
// With experts sharded, dispatch [S(1)] -> expert matmul [S(0)] is the engine's S(1) -> S(0)
// redistribution: one all_to_all, as in expert parallelism.
//   pad(self, pad, mode, value) -> self with pad[2i], pad[2i+1] added before/after dim rank-1-i
//     (ATen's pad; negative amounts crop). rows: [S(d); S(d)] for every dim d left unpadded.
//   opaque(inputs[...], shape, dtype, aten) -> [*shape] of dtype
//     An op the planner has no rule for, kept in an imported graph (python/dtensor/planning.py) so
//     the plan still covers the model: no rules, so only the all-Replicate row (every input gathered
//     to every rank, the output replicated). Priced as a copy: reads its inputs, writes its output,
//     0 FLOPs. `aten` names the original op for reports.
#include <cstdlib>

#include "dtensor/core/limits.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

constexpr char kPlannerOnly[] = "planner-only: no kernel, never run, so never differentiated";

[[noreturn]] void bad(const OpCall& c, const std::string& what) { fail(c, what); }

void define_batch_norm(Registry& reg) {
  OpDef& op = reg.define(
      "batch_norm(Tensor input, Tensor? weight=None, Tensor? bias=None, bool training=True, "
      "float momentum=0.1, float eps=1e-05) -> Tensor",
      "planned");
  op.cost = cost(CostClass::kNormalization);
  op.no_backward = kPlannerOnly;
  op.meta = [](const OpCall& c) {
    const Shape& x = c.tensor(0).shape;
    if (x.size() < 2) bad(c, "accepted: input[N, C, ...]");
    for (const char* a : {"weight", "bias"}) {
      int i = c.tensor_index(a);
      if (i >= 0 && c.tensor(i).shape != Shape{x[1]}) bad(c, absl::StrCat(a, " must have shape [", x[1], "]"));
    }
    return std::vector<TensorMeta>{c.tensor(0)};
  };
  StepDef sync;
  sync.name = "sync_stats";
  sync.traffic = [](const OpCall& c, const Strategy&, const std::vector<int>& mesh_dims) {
    int64_t n = 1;
    for (int i : mesh_dims) n *= c.mesh_shape()[i];
    // all_reduce of sum and sum of squares per channel (float32): 8*C bytes.
    return StepTraffic{CommKind::kAllReduce, comm_bytes_sent(CommKind::kAllReduce, 8 * c.tensor(0).shape[1], n), 1};
  };
  op.steps.push_back(sync);
}

void define_moe(Registry& reg) {
  {
    OpDef& op = reg.define(
        "moe_dispatch(Tensor self, Tensor probs, int top_k=2, float capacity_factor=1.0) -> Tensor", "planned");
    op.cost = cost(CostClass::kCopy);  // a gather into expert buffers
    op.no_backward = kPlannerOnly;
    op.aten.not_aten = "the planner's MoE token dispatch (zoo models; no ATen op)";
    op.meta = [](const OpCall& c) {
      const Shape& x = c.tensor(0).shape;
      const Shape& p = c.tensor(1).shape;
      if (x.size() != 2 || p.size() != 2 || p[0] != x[0]) bad(c, "accepted: self[T, H] and probs[T, E]");
      const int64_t k = c.get_int("top_k");
      if (k < 1 || k > p[1]) bad(c, absl::StrCat("top_k must be in [1, ", p[1], "]"));
      const double factor = c.get_double("capacity_factor");
      if (!(factor > 0) || factor > 1e6) bad(c, "capacity_factor must be a number in (0, 1e6]");
      const double cap = static_cast<double>(k) * x[0] * factor / p[1];
      if (cap > static_cast<double>(kMaxTensorBytes)) bad(c, "the expert capacity is above the tensor size limit");
      int64_t cap_i = static_cast<int64_t>(cap);
      if (static_cast<double>(cap_i) < cap) ++cap_i;
      return std::vector<TensorMeta>{{{p[1], std::max<int64_t>(cap_i, 1), x[1]}, c.tensor(0).dtype}};
    };
  }
  {
    OpDef& op = reg.define("moe_combine(Tensor self, Tensor probs, int top_k=2) -> Tensor", "planned");
    // A weighted sum over each token's experts: a multiply-add per element of the expert outputs.
    op.aten.not_aten = "the planner's MoE combine (zoo models; no ATen op)";
    op.cost = cost(CostClass::kContraction);
    op.cost.flops = [](const OpCall& c, const std::vector<TensorMeta>&) {
      return 2 * static_cast<double>(numel(c.tensor(0).shape));
    };
    op.no_backward = kPlannerOnly;
    op.meta = [](const OpCall& c) {
      const Shape& y = c.tensor(0).shape;
      const Shape& p = c.tensor(1).shape;
      if (y.size() != 3 || p.size() != 2 || p[1] != y[0]) bad(c, "accepted: self[E, C, H] and probs[T, E]");
      return std::vector<TensorMeta>{{{p[0], y[2]}, c.tensor(0).dtype}};
    };
  }
}

void define_pad(Registry& reg) {
  OpDef& op = reg.define("pad(Tensor self, int[] pad, str mode='constant', float? value=None) -> Tensor", "planned");
  op.cost = cost(CostClass::kCopy);
  op.no_backward = kPlannerOnly;
  op.meta = [](const OpCall& c) {
    Shape x = c.tensor(0).shape;
    const std::vector<int64_t> p = c.get_int_list("pad");
    if (p.size() % 2 != 0 || p.size() > 2 * x.size())
      bad(c, absl::StrCat("pad needs an even number of values, at most 2 x rank ", x.size(), ", not ", p.size()));
    for (size_t i = 0; i < p.size(); i += 2) {
      int64_t& d = x[x.size() - 1 - i / 2];
      // |amounts| are bounded so the sum below cannot overflow; the result is checked by the graph.
      if (std::abs(p[i]) > kMaxTensorBytes || std::abs(p[i + 1]) > kMaxTensorBytes || d + p[i] + p[i + 1] < 0)
        bad(c, absl::StrCat("padding (", p[i], ", ", p[i + 1], ") does not fit a dim of size ", d));
      d += p[i] + p[i + 1];
    }
    return std::vector<TensorMeta>{{x, c.tensor(0).dtype}};
  };
}

void define_opaque(Registry& reg) {
  OpDef& op = reg.define("opaque(Tensor[] inputs, int[] shape, ScalarType dtype='float32', str aten='') -> Tensor",
                         "planned");
  op.cost = cost(CostClass::kCopy);
  op.no_backward = kPlannerOnly;
  op.replicate_only = "an op the planner knows nothing of but its output's shape and dtype";
  op.aten.not_aten = "stands for an ATen op the planner has no rule for";
  op.meta = [](const OpCall& c) {
    const std::vector<int64_t> shape = c.get_int_list("shape");
    if (static_cast<int64_t>(shape.size()) > kMaxTensorRank)
      bad(c, absl::StrCat("shape has ", shape.size(), " dims; at most ", kMaxTensorRank, " are accepted"));
    int64_t n = 1;
    for (int64_t s : shape) {
      if (s < 0) bad(c, absl::StrCat("shape sizes must be >= 0, not ", s));
      n = checked_mul(n, s, "opaque: shape element count");  // graph.cc bounds the bytes
    }
    DType dt;
    try {
      dt = dtype_from_name(c.get_str("dtype"));
    } catch (const std::exception& e) {
      bad(c, e.what());
    }
    return std::vector<TensorMeta>{{Shape(shape.begin(), shape.end()), dt}};
  };
}

void define_planned_ops(Registry& reg) {
  define_batch_norm(reg);
  define_moe(reg);
  define_pad(reg);
  define_opaque(reg);
}

}  // namespace

DTENSOR_FAMILY_PART("planned", kDefinitions, define_planned_ops);

}  // namespace dtensor::ops
