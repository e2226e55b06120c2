// The ring attention steps (ops/attention/ring.h) of scaled_dot_product_attention and its
// backward: query, key and value (and grad_out, out) sharded on the sequence dim over one mesh dim
// stay sharded, instead of all-gathering key and value. Offered for self-attention shapes (L == S)
// without attn_mask; ops/attention/rules_ring.cc adds the rule rows. Traffic: the ring formula of
// ring_attention_bytes_sent over point-to-point rounds; the forward's rounds run under the block
// computations (StepTraffic::overlapped), the backward's do not (each waits for its gradients).
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor_spec.h"
#include "ops/attention/ring.h"
#include "ops/common/steps.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

std::optional<double> scale_of(const OpCall& c) {
  if (!c.has("scale")) return std::nullopt;
  return c.get_double("scale");
}

// The bytes rank 0 of the ring sends, for the blocks at mesh coordinate 0 (every rank sends the same
// for even chunks; the cost model prices one rank).
int64_t bytes_of(const OpCall& c, const Strategy& st, int q, int k, int v, const std::vector<int>& dims,
                 bool backward) {
  const Shape& qs = c.tensor(q).shape;
  const int64_t r = static_cast<int64_t>(qs.size());
  const std::vector<int64_t> origin(c.mesh_shape().size(), 0);
  const Shape kb = local_block(c.tensor(k).shape, st.inputs[k], c.mesh_shape(), origin, dims[0]).first;
  const Shape vb = local_block(c.tensor(v).shape, st.inputs[v], c.mesh_shape(), origin, dims[0]).first;
  int64_t batch = 1;
  for (int64_t d = 0; d + 2 < r; ++d) batch *= kb[d];
  const int n = static_cast<int>(c.mesh_shape()[dims[0]]);
  return ring_attention_bytes_sent(batch, kb[r - 2], kb[r - 1], vb.back(),
                                   static_cast<int64_t>(itemsize(c.tensor(k).dtype)), n, 0, backward);
}

// No mesh dim but the step's shards the sequence dim of `tensors`.
bool only_ring_shards_seq(const OpCall& c, const Strategy& st, std::initializer_list<int> tensors) {
  const auto dims = st.step_mesh_dims();
  for (int t : tensors) {
    const int32_t seq = static_cast<int32_t>(c.tensor(t).shape.size()) - 2;
    for (size_t m = 0; m < st.inputs[t].size(); ++m)
      if (st.inputs[t][m].is_shard() && st.inputs[t][m].dim == seq && static_cast<int>(m) != dims[0]) return false;
  }
  return true;
}

StepDef forward_step() {
  StepDef step;
  step.name = "ring_attention";
  step.one_mesh_dim = true;
  step.runs_on_device = true;  // kernels, Tensor methods and point-to-point only; buffers on the blocks' device
  step.point_to_point_only = true;
  step.valid = [](const OpCall& c, const Strategy& st) { return only_ring_shards_seq(c, st, {0, 1, 2}); };
  step.traffic = [](const OpCall& c, const Strategy& st, const std::vector<int>& dims) {
    const int n = static_cast<int>(c.mesh_shape()[dims[0]]);
    StepTraffic t{CommKind::kSendRecv, bytes_of(c, st, 0, 1, 2, dims, false), std::max(n - 1, 1)};
    t.overlapped = true;
    return t;
  };
  step.run = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&, const std::vector<int>& dims,
                const DeviceMesh& mesh, Timeout to) {
    const int64_t seq = c.tensor(0).shape[c.tensor(0).shape.size() - 2];
    RingAttentionOut o = ring_attention_forward(mesh.group(dims[0]), in[0], in[1], in[2], seq,
                                                c.get_bool("is_causal"), scale_of(c), to);
    return std::vector<Tensor>{o.out};
  };
  return step;
}

// The log-sum-exp is not an output of the forward op, so the backward recomputes it by a forward
// ring (as flash attention's backward recomputes the probabilities).
StepDef backward_step() {
  StepDef step;
  step.name = "ring_attention";
  step.one_mesh_dim = true;
  step.runs_on_device = true;
  step.point_to_point_only = true;
  // A partial grad_out (the linear rows on another mesh dim) is left to the other rows: the bfloat16
  // validator run of that combination differed by more than its tolerance (not yet understood).
  step.valid = [](const OpCall& c, const Strategy& st) {
    for (const Placement& p : st.inputs[0])
      if (p.is_partial()) return false;
    return only_ring_shards_seq(c, st, {0, 1, 2, 3, 4});
  };
  step.traffic = [](const OpCall& c, const Strategy& st, const std::vector<int>& dims) {
    const int n = static_cast<int>(c.mesh_shape()[dims[0]]);
    return StepTraffic{CommKind::kSendRecv,
                       bytes_of(c, st, 1, 2, 3, dims, false) + bytes_of(c, st, 1, 2, 3, dims, true),
                       std::max(2 * n - 1, 1)};
  };
  step.run = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&, const std::vector<int>& dims,
                const DeviceMesh& mesh, Timeout to) {
    const int64_t seq = c.tensor(1).shape[c.tensor(1).shape.size() - 2];
    ProcessGroup& pg = mesh.group(dims[0]);
    const bool causal = c.get_bool("is_causal");
    RingAttentionOut f = ring_attention_forward(pg, in[1], in[2], in[3], seq, causal, scale_of(c), to);
    kernels::AttentionGrads g =
        ring_attention_backward(pg, in[0], in[1], in[2], in[3], in[4], f.lse, seq, causal, scale_of(c), to);
    return std::vector<Tensor>{g.query, g.key, g.value};
  };
  return step;
}

}  // namespace

void add_ring_attention_steps(Registry& reg) {
  reg.mutable_find("scaled_dot_product_attention").steps.push_back(forward_step());
  reg.mutable_find("_scaled_dot_product_attention_backward").steps.push_back(backward_step());
}

DTENSOR_FAMILY_PART("attention", kSteps, add_ring_attention_steps);

}  // namespace dtensor::ops
