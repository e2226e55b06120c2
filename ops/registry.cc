#include "ops/registry.h"

#include <algorithm>

#include "absl/strings/str_join.h"

namespace dtensor {

std::string Strategy::str() const {
  auto join = [](const std::vector<Placements>& v) {
    return absl::StrJoin(v, ", ", [](std::string* o, const Placements& p) { o->append(placements_str(p)); });
  };
  return join(outputs) + " <- " + join(inputs);
}

uint8_t Strategy::step() const {
  for (uint8_t s : steps)
    if (s != 0) return s;
  return 0;
}

std::vector<int> Strategy::step_mesh_dims() const {
  std::vector<int> dims;
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i] != 0) dims.push_back(static_cast<int>(i));
  return dims;
}

std::pair<Shape, Shape> LocalContext::in_block(const OpCall& call, int i) const {
  if (!strategy) return {call.tensor(i).shape, Shape(call.tensor(i).shape.size(), 0)};
  return local_block(call.tensor(i).shape, strategy->inputs[i], mesh_shape, coord);
}

std::pair<Shape, Shape> LocalContext::out_block(int i) const {
  if (!strategy) return {out_meta[i].shape, Shape(out_meta[i].shape.size(), 0)};
  return local_block(out_meta[i].shape, strategy->outputs[i], mesh_shape, coord);
}

bool LocalContext::in_whole_along(const OpCall& call, int i, int64_t dim) const {
  return in_block(call, i).first[dim] == call.tensor(i).shape[dim];
}

std::vector<TensorMeta> settle_output_meta(const OpCall& call, const std::vector<Placements>& outputs,
                                           std::vector<TensorMeta> meta, const std::vector<Shape>& local) {
  for (const DataDependentDim& dd : call.op().data_dependent) {
    DT_CHECK(dd.output < static_cast<int>(meta.size()) && dd.output < static_cast<int>(local.size()) &&
                 dd.output < static_cast<int>(outputs.size()),
             call.str(), ": internal error: data-dependent output ", dd.output, " of ", meta.size(), " outputs");
    TensorMeta& m = meta[dd.output];
    const Shape& block = local[dd.output];
    DT_CHECK(block.size() == m.shape.size() && dd.dim < static_cast<int>(m.shape.size()), call.str(),
             ": internal error: output ", dd.output, "'s block ", shape_str(block), " for the bound ",
             shape_str(m.shape), " (data-dependent dim ", dd.dim, ")");
    for (const Placement& p : outputs[dd.output])
      DT_CHECK(!p.is_shard(dd.dim), call.str(), ": output ", dd.output, " placed ", placements_str(outputs[dd.output]),
               " shards dim ", dd.dim, ", whose size only the data gives; accepted: every rank holding that "
               "dim whole (a rule of this op must not shard it)");
    DT_CHECK(block[dd.dim] <= m.shape[dd.dim], call.str(), ": internal error: output ", dd.output, " has ",
             block[dd.dim], " along dim ", dd.dim, ", above meta's bound ", m.shape[dd.dim]);
    m.shape[dd.dim] = block[dd.dim];
  }
  return meta;
}

const char* cost_class_name(CostClass c) {
  switch (c) {
    case CostClass::kUnset: return "unset";
    case CostClass::kView: return "view";
    case CostClass::kCopy: return "copy";
    case CostClass::kElementwise: return "elementwise";
    case CostClass::kTranscendental: return "transcendental";
    case CostClass::kContraction: return "contraction";
    case CostClass::kNormalization: return "normalization";
    case CostClass::kLoss: return "loss";
    case CostClass::kWindow: return "window";
    case CostClass::kOnePass: return "one-pass";
  }
  return "?";
}

Registry& Registry::get() {
  static Registry* r = new Registry();
  return *r;
}

OpDef& Registry::define(const std::string& schema_text, const std::string& family) {
  auto def = std::make_unique<OpDef>();
  def->schema = OpSchema::parse(schema_text);
  def->family = family;
  DT_CHECK(try_find(def->schema.name) == nullptr, "Registry: op '", def->schema.name,
           "' is defined twice");
  const std::string& name = def->schema.name;
  by_name_[name] = def.get();
  const size_t dot = name.find('.');
  auto& same_base = by_base_[name.substr(0, dot)];
  if (dot == std::string::npos) {
    same_base.insert(same_base.begin(), def.get());  // the bare-named op is tried first
  } else {
    same_base.push_back(def.get());
    exact_[name] = {def.get()};
  }
  ops_.push_back(std::move(def));
  return *ops_.back();
}

const std::vector<const OpDef*>& Registry::overloads(const std::string& name) const {
  static const std::vector<const OpDef*> none;
  const auto& index = name.find('.') == std::string::npos ? by_base_ : exact_;
  auto it = index.find(name);
  return it == index.end() ? none : it->second;
}

const OpDef* Registry::try_find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const OpDef& Registry::find(const std::string& name) const {
  const OpDef* op = try_find(name);
  DT_CHECK(op != nullptr, "unsupported op '", name, "'; registered ops: ",
           absl::StrJoin(names(), ", "));
  return *op;
}

OpDef& Registry::mutable_find(const std::string& name, std::source_location where) {
  const OpDef* op = try_find(name);
  DT_CHECK(op != nullptr, "registry: ", where.file_name(), ":", where.line(), " registers for op '", name,
           "', which no op family (ops/<family>/) defines; defined ops: ", absl::StrJoin(names(), ", "));
  return const_cast<OpDef&>(*op);
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& op : ops_) out.push_back(op->schema.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace dtensor
