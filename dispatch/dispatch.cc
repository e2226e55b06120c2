#include "dispatch/dispatch.h"

#include "kernels/device_dispatch.h"
#include "ops/common/defs.h"
#include "strategies/common.h"

namespace dtensor {

void init_ops() {
  ops::define_all_ops();
  strategies::register_all_rules();
}

namespace {

// The device of the call's local tensors (cpu when there are none); throws naming the op, its
// shapes and placements and the devices when they differ.
Device device_of(const OpCall& call, const std::vector<Tensor>& locals) {
  Device d = locals.empty() ? cpu() : locals[0].device();
  for (size_t i = 1; i < locals.size(); ++i)
    DT_CHECK(locals[i].device() == d, call.str(), ": tensor input 0 is on ", d.str(), " and tensor input ",
             i, " on ", locals[i].device().str(), "; accepted: every input on one device (move them with "
             "Tensor::to(Device) or distribute them from tensors on that device)");
  return d;
}

// True when `step` can take `d`'s tensors as they are: its code is device-generic and every group it
// communicates over moves `d`'s memory (StepDef::runs_on_device; for a point-to-point-only step,
// the group's messages do: ProcessGroup::p2p_moves).
bool step_runs_on(const StepDef& step, const std::vector<int>& mesh_dims, const DeviceMesh& mesh, const Device& d) {
  if (!step.runs_on_device) return false;
  for (int md : mesh_dims) {
    const ProcessGroup& g = mesh.group(md);
    if (g.home() != d && !(step.point_to_point_only && g.p2p_moves(d))) return false;
  }
  return true;
}

// Runs `run(inputs)` where the inputs are, except a distributed step on a device that it cannot run
// on (step_runs_on): that runs on host copies, its outputs copied back (counted like a kernel's host
// fallback). `step` is null for a kernel.
std::vector<Tensor> run_on_device(const OpCall& call, std::vector<Tensor> locals, const StepDef* step,
                                  const std::vector<int>& step_dims, const DeviceMesh* mesh,
                                  const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& run) {
  const Device d = device_of(call, locals);
  if (d.is_cpu() || step == nullptr || step_runs_on(*step, step_dims, *mesh, d)) return run(locals);
  kernels::note_host_fallback(call.op().name() + " (distributed step)");
  for (Tensor& t : locals) t = t.to(cpu());
  std::vector<Tensor> outs = run(locals);
  for (Tensor& t : outs) t = t.to(d);
  return outs;
}

// The planned family's ops have rules and a cost but no kernel: they are planned, never run.
void check_runnable(const OpCall& call) {
  DT_CHECK(call.op().kernel, call.str(), ": ", call.op().name(), " has no kernel (the planned family, "
           "ops/planned/); accepted: `dtensor plan` and explain without \"run\" take it, nothing runs it");
}

// True when every step of `plan` runs on a mesh dim of size 1: each collective over one rank (and a
// local narrow to the one chunk) leaves the block as it is, so the input goes to the kernel as is,
// strides included, instead of through redistribute_local's contiguous copy (at tp=1 that copied
// every transposed matmul operand).
bool is_identity_plan(const RedistributePlan& plan, const Shape& mesh_shape) {
  for (const RedistributeStep& s : plan.steps)
    if (mesh_shape[s.mesh_dim] != 1) return false;
  return true;
}

}  // namespace

std::vector<DTensor> execute_strategy(
    const OpCall& call, const Strategy& strategy, const std::vector<TensorMeta>& out_meta,
    const std::vector<DTensor>& inputs, Timeout timeout,
    const std::vector<std::shared_ptr<const RedistributePlan>>* plans) {
  check_runnable(call);
  const MeshPtr& mesh = inputs.at(0).mesh();
  std::vector<Tensor> locals;
  locals.reserve(inputs.size());
  for (size_t t = 0; t < inputs.size(); ++t) {
    const DTensor& x = inputs[t];
    if (x.placements() == strategy.inputs[t]) {
      locals.push_back(x.local_tensor());
      continue;
    }
    auto plan = plans ? (*plans)[t] : plan_redistribute(x.spec(), strategy.inputs[t]);
    if (is_identity_plan(*plan, mesh->shape())) {
      locals.push_back(x.local_tensor());
      continue;
    }
    locals.push_back(redistribute_local(x.local_tensor(), x.spec(), *plan, timeout));
  }
  return run_strategy(call, strategy, out_meta, mesh, std::move(locals), timeout);
}

std::vector<DTensor> run_strategy(const OpCall& call, const Strategy& strategy, const std::vector<TensorMeta>& out_meta,
                                  const MeshPtr& mesh, std::vector<Tensor> locals, Timeout timeout) {
  check_runnable(call);
  LocalContext ctx;
  ctx.strategy = &strategy;
  ctx.out_meta = out_meta;
  ctx.mesh_shape = mesh->shape();
  ctx.coord = mesh->coordinate();
  const uint8_t step = strategy.step();
  const StepDef* step_def = step != 0 ? &call.op().steps.at(step - 1) : nullptr;
  const std::vector<int> step_dims = step != 0 ? strategy.step_mesh_dims() : std::vector<int>{};
  std::vector<Tensor> outs = run_on_device(
      call, std::move(locals), step_def, step_dims, mesh.get(), [&](const std::vector<Tensor>& in) {
        if (step_def != nullptr) return step_def->run(in, call, ctx, step_dims, *mesh, timeout);
        return call.op().kernel(in, call, ctx);
      });
  DT_CHECK(outs.size() == out_meta.size(), call.str(), ": internal error: the kernel returned ",
           outs.size(), " outputs, the op has ", out_meta.size());
  // An op with data-dependent output dims (OpDef::data_dependent): their sizes come from the blocks
  // just computed, never from the cached decision's bound.
  std::vector<TensorMeta> settled;
  if (!call.op().data_dependent.empty()) {
    std::vector<Shape> local;
    for (const Tensor& t : outs) local.push_back(t.sizes());
    settled = settle_output_meta(call, strategy.outputs, out_meta, local);
  }
  const std::vector<TensorMeta>& metas = settled.empty() ? out_meta : settled;
  std::vector<DTensor> result;
  result.reserve(outs.size());
  for (size_t o = 0; o < outs.size(); ++o)
    result.emplace_back(DTensorSpec(mesh, strategy.outputs[o], metas[o].shape, metas[o].dtype),
                        std::move(outs[o]));
  return result;
}

std::vector<Tensor> run_single_device(const OpCall& call, const std::vector<Tensor>& inputs) {
  check_runnable(call);
  LocalContext ctx;
  ctx.out_meta = call.op().meta(call);
  return run_on_device(call, inputs, nullptr, {}, nullptr,
                       [&](const std::vector<Tensor>& in) { return call.op().kernel(in, call, ctx); });
}

namespace {

// Turns an OpArg into an ArgValue, appending its DTensors to `tensors`.
ArgValue lower(const OpArg& a, std::vector<const DTensor*>& tensors) {
  if (const auto* d = std::get_if<DTensor>(&a)) {
    tensors.push_back(d);
    return TensorRef{static_cast<int>(tensors.size()) - 1};
  }
  if (const auto* l = std::get_if<std::vector<DTensor>>(&a)) {
    TensorListRef ref;
    for (const DTensor& d : *l) {
      if (!d.defined()) {  // None, for a Tensor?[] argument (index.Tensor's x[:, i])
        ref.indices.push_back(TensorListRef::kNoTensor);
        continue;
      }
      tensors.push_back(&d);
      ref.indices.push_back(static_cast<int>(tensors.size()) - 1);
    }
    return ref;
  }
  return std::get<IValue>(a);
}

}  // namespace

PreparedCall prepare_call(const std::string& name, const std::vector<OpArg>& args,
                          const std::vector<std::pair<std::string, OpArg>>& kwargs) {
  init_ops();
  std::vector<const DTensor*> tensors;
  std::vector<ArgValue> pos;
  pos.reserve(args.size());
  for (const OpArg& a : args) pos.push_back(lower(a, tensors));
  std::vector<std::pair<std::string, ArgValue>> kw;
  for (const auto& [k, a] : kwargs) kw.emplace_back(k, lower(a, tensors));
  std::vector<const DTensorSpec*> specs;
  std::vector<DTensor> inputs;
  specs.reserve(tensors.size());
  inputs.reserve(tensors.size());
  for (const DTensor* d : tensors) {
    specs.push_back(&d->spec());
    inputs.push_back(*d);
  }
  return {bind_call(name, pos, kw, specs), std::move(inputs)};
}

OpCall bind_call(const std::string& name, const std::vector<ArgValue>& pos,
                 const std::vector<std::pair<std::string, ArgValue>>& kw,
                 const std::vector<const DTensorSpec*>& specs) {
  init_ops();
  DT_CHECK(!specs.empty(), name, ": needs at least one DTensor argument");
  const MeshPtr& mesh = specs[0]->mesh;
  std::vector<TensorMeta> metas;
  std::vector<Placements> placements;
  metas.reserve(specs.size());
  placements.reserve(specs.size());
  for (const DTensorSpec* s : specs) {
    DT_CHECK(mesh && s->mesh && s->mesh->same_as(*mesh), name, ": tensors are on different meshes: ",
             mesh ? mesh->str() : "none", " and ", s->mesh ? s->mesh->str() : "none",
             "; redistribute both onto one mesh first");
    metas.push_back({s->shape, s->dtype});
    placements.push_back(s->placements);
  }
  return OpCall::bind_overload(name, pos, kw, metas, placements, mesh->shape());
}

std::vector<DTensor> run_call(const PreparedCall& p, const CallOptions& options) {
  auto decision = propagate(p.call, {options.hardware});
  return execute_strategy(p.call, decision->strategy, decision->out_meta, p.inputs, options.timeout,
                          &decision->input_plans);
}

std::vector<DTensor> call_op(const std::string& name, const std::vector<OpArg>& args,
                             const std::vector<std::pair<std::string, OpArg>>& kwargs,
                             const CallOptions& options) {
  return run_call(prepare_call(name, args, kwargs), options);
}

DTensor call_op1(const std::string& name, const std::vector<OpArg>& args,
                 const std::vector<std::pair<std::string, OpArg>>& kwargs, const CallOptions& options) {
  auto out = call_op(name, args, kwargs, options);
  DT_CHECK(out.size() == 1, name, ": returns ", out.size(), " tensors; use call_op");
  return out[0];
}

}  // namespace dtensor
