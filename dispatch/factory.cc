#include "dispatch/factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtensor {

OpCall bind_factory(const std::string& name, const std::vector<IValue>& args,
                    const std::vector<std::pair<std::string, IValue>>& kwargs, const Shape& mesh_shape) {
  init_ops();
  for (const OpDef* op : Registry::get().overloads(name))
    for (const ArgDef& a : op->schema.args)
      DT_CHECK(a.type != ArgDef::kTensor && a.type != ArgDef::kTensorList, name, ": ", op->schema.text,
               " takes tensor input '", a.name, "', so it is no factory; accepted: ops with no tensor "
               "argument (arange, empty, empty_strided, full, rand, randn, randperm, scalar_tensor); call "
               "this one with call_op on DTensors");
  std::vector<ArgValue> pos(args.begin(), args.end());
  std::vector<std::pair<std::string, ArgValue>> kw(kwargs.begin(), kwargs.end());
  return OpCall::bind_overload(name, pos, kw, {}, {}, mesh_shape);
}

Strategy factory_strategy(const OpCall& call, const std::vector<TensorMeta>& out_meta, Placements placements) {
  const Shape& mesh = call.mesh_shape();
  const std::string out = out_meta.empty() ? std::string("no output")
                                           : absl::StrCat(dtype_name(out_meta[0].dtype), shape_str(out_meta[0].shape));
  DT_CHECK(placements.size() == mesh.size(), call.str(), ": ", placements.size(), " placements ",
           placements_str(placements), " for a ", mesh.size(), "-d mesh ", shape_str(mesh),
           "; accepted: one placement per mesh dim");
  for (Placement& p : placements) {
    DT_CHECK(!p.is_partial(), call.str(), ": output ", out, " asked as ", placements_str(placements),
             "; a factory's output cannot be Partial: every rank makes the whole value, which the "
             "reduction would count once per rank; accepted: Shard and Replicate");
    for (const TensorMeta& m : out_meta) {
      const int64_t rank = static_cast<int64_t>(m.shape.size());
      if (!p.is_shard()) continue;
      DT_CHECK(p.dim < rank && p.dim >= -rank, call.str(), ": output ", out, " asked as ",
               placements_str(placements), ": Shard(", p.dim, ") of a ", rank, "-d output, which has no dim ",
               p.dim, "; accepted: Shard(d) for 0 <= d < ", rank, ", or Replicate");
      if (p.dim < 0) p.dim += static_cast<int32_t>(rank);
    }
  }
  std::vector<std::string> accepted;
  for (Strategy& s : expand_strategies(call, out_meta, /*check_shardable=*/false)) {
    bool partial = false;  // a rule offering a Partial output is not taken (see the header)
    for (const Placements& o : s.outputs)
      for (const Placement& q : o) partial |= q.is_partial();
    if (partial) continue;
    bool match = true;
    for (const Placements& o : s.outputs) match &= o == placements;
    if (match) return std::move(s);
    const std::string a = placements_str(s.outputs.at(0));
    if (std::find(accepted.begin(), accepted.end(), a) == accepted.end()) accepted.push_back(a);
  }
  DT_FAIL(call.str(), ": output ", out, " asked as ", placements_str(placements), "; accepted: ",
          absl::StrJoin(accepted, ", "),
          call.op().replicate_only.empty() ? "" : absl::StrCat(" (", call.op().replicate_only, ")"));
}

std::vector<DTensor> call_factory(const std::string& name, const std::vector<IValue>& args,
                                  const std::vector<std::pair<std::string, IValue>>& kwargs, const MeshPtr& mesh,
                                  const Placements& placements) {
  DT_CHECK(mesh != nullptr, name, ": no mesh; accepted: the DeviceMesh to lay the output out on");
  const OpCall call = bind_factory(name, args, kwargs, mesh->shape());
  const std::vector<TensorMeta> meta = call.op().meta(call);
  const Strategy strategy = factory_strategy(call, meta, placements);
  std::vector<DTensor> result;
  if (!mesh->contains_me()) {  // no block here, as distribute_tensor gives such a rank
    for (size_t o = 0; o < meta.size(); ++o) {
      DTensorSpec spec(mesh, strategy.outputs[o], meta[o].shape, meta[o].dtype);
      result.emplace_back(spec, Tensor::empty(spec.local_shape(), meta[o].dtype));
    }
    return result;
  }
  result = run_strategy(call, strategy, meta, mesh, {}, default_timeout());  // no collective runs
  for (const DTensor& d : result)
    DT_CHECK(d.local_tensor().sizes() == d.spec().local_shape() && d.local_tensor().dtype() == d.dtype(), call.str(),
             ": internal error: the kernel's block ", d.local_tensor().str(), " is not the layout's ",
             dtype_name(d.dtype()), shape_str(d.spec().local_shape()), " under ", d.spec().str());
  return result;
}

}  // namespace dtensor
