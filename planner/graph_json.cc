#include "planner/graph_json.h"

#include <algorithm>
#include <type_traits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/limits.h"
#include "dtensor/core/json.h"
#include "nlohmann/json.hpp"

namespace dtensor::planner {
namespace {

using json = nlohmann::json;

json ivalue_json(const IValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return nullptr;
  if (auto* b = std::get_if<bool>(&v)) return *b;
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  if (auto* l = std::get_if<std::vector<int64_t>>(&v)) return *l;
  return std::get<std::vector<double>>(v);
}

IValue json_ivalue(const json& j, const std::string& where) {
  if (j.is_null()) return IValue();
  if (j.is_boolean()) return IValue(j.get<bool>());
  if (j.is_number_integer()) return IValue(j.get<int64_t>());
  if (j.is_number()) return IValue(j.get<double>());
  if (j.is_string()) return IValue(j.get<std::string>());
  if (j.is_array()) {
    bool ints = true;
    for (const json& e : j) {
      DT_CHECK(e.is_number(), where, ": a list value must hold numbers");
      ints &= e.is_number_integer();
    }
    if (ints) return IValue(j.get<std::vector<int64_t>>());
    return IValue(j.get<std::vector<double>>());
  }
  DT_FAIL(where, ": unsupported value ", j.dump());
}

std::string tensor_name(const ModelGraph& g, TensorId t) {
  // A redistribution is the planner's, not the model's (GraphBuilder::finish adds it again).
  if (g.node(t.node).kind == NodeKind::kRedistribute) t = g.inputs(t.node)[0];
  const Node& n = g.node(t.node);
  return n.outputs.size() > 1 || t.output != 0 ? n.name + ":" + std::to_string(t.output) : n.name;
}

}  // namespace

std::string graph_to_json(const ModelGraph& g) {
  json nodes = json::array();
  for (int v : g.topological_order()) {
    const Node& n = g.node(v);
    if (n.kind == NodeKind::kOptimizer || n.kind == NodeKind::kRedistribute) continue;
    json j;
    j["name"] = n.name;
    if (n.kind != NodeKind::kOp) {
      j["kind"] = node_kind_name(n.kind);
      j["shape"] = std::vector<int64_t>(n.outputs[0].shape.begin(), n.outputs[0].shape.end());
      j["dtype"] = dtype_name(n.outputs[0].dtype);
    } else {
      j["op"] = n.op;
      const auto ins = g.inputs(v);
      auto arg = [&](const ArgValue& a) -> json {
        if (auto* t = std::get_if<TensorRef>(&a)) return tensor_name(g, ins[t->index]);
        if (auto* l = std::get_if<TensorListRef>(&a)) {
          json arr = json::array();
          for (int i : l->indices) arr.push_back(tensor_name(g, ins[i]));
          return arr;
        }
        return ivalue_json(std::get<IValue>(a));
      };
      json args = json::array();
      for (const ArgValue& a : n.positional) args.push_back(arg(a));
      j["args"] = args;
      json kw = json::object();
      for (const auto& [k, a] : n.keyword) kw[k] = arg(a);
      j["kwargs"] = kw;
      if (!n.role.empty()) j["role"] = n.role;
      if (n.fused) j["fused"] = true;
    }
    if (n.layer >= 0) j["layer"] = n.layer;
    if (!n.block.empty()) j["block"] = n.block;
    nodes.push_back(j);
  }
  json root;
  root["format"] = "dtensor-graph/1";
  root["name"] = g.name;
  root["description"] = g.description;
  root["training"] = g.training;
  root["optimizer"] = g.optimizer;
  root["nodes"] = nodes;
  return root.dump(1);
}

namespace {

// An op node's "shapes" (the producer's traced output shapes) against the computed ones. A
// data-dependent dim (OpDef::data_dependent: nonzero's row count) is not compared: the planner
// holds meta's upper bound there (and prices the op at it), the trace one run's size or a symbol.
void check_traced_shapes(const json& shapes, const std::vector<TensorId>& outs, const GraphBuilder& b,
                         const OpDef& def, const std::string& where) {
  DT_CHECK(shapes.is_array() && shapes.size() <= outs.size(), where, ": \"shapes\" must be a list of at most ",
           outs.size(), " output shapes (lists of sizes, or null)");
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (shapes[i].is_null()) continue;
    DT_CHECK(shapes[i].is_array(), where, ": \"shapes\"[", i, "] must be a list of sizes or null");
    const Shape& computed = b.meta(outs[i]).shape;
    bool same = shapes[i].size() == computed.size();
    for (size_t d = 0; same && d < computed.size(); ++d) {
      const bool data = std::any_of(def.data_dependent.begin(), def.data_dependent.end(), [&](const DataDependentDim& x) {
        return x.output == static_cast<int>(i) && x.dim == static_cast<int>(d);
      });
      same = data || (shapes[i][d].is_number_integer() && shapes[i][d].get<int64_t>() == computed[d]);
    }
    DT_CHECK(same, where, ": output ", i, " has shape [", absl::StrJoin(computed, ", "), "] by the op's schema, but ",
             "the graph's producer traced ", shapes[i].dump().substr(0, 80),
             " (an argument translated wrongly from the source graph?)");
  }
}

// A field that may be absent (then `fallback`) but, when present, must have the JSON type T: a wrong
// type is an Error naming the field, never nlohmann's bare "type must be ...".
template <typename T>
T optional_field(const json& j, const char* key, T fallback, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  bool ok;
  const char* expected;
  if constexpr (std::is_same_v<T, bool>) {
    ok = it->is_boolean(), expected = "true or false";
  } else if constexpr (std::is_integral_v<T>) {
    ok = it->is_number_integer(), expected = "an integer";
  } else {
    ok = it->is_string(), expected = "a string";
  }
  std::string shown = it->dump();
  if (shown.size() > 60) shown = shown.substr(0, 60) + "...";
  DT_CHECK(ok, where, ": \"", key, "\" must be ", expected, ", not ", it->type_name(), " ", shown);
  return it->template get<T>();
}

// Layers index repeated blocks: -1 (none) up to a bound far above any real model's depth.
constexpr int64_t kMaxLayerIndex = 1 << 20;

}  // namespace

ModelGraph graph_from_json(const std::string& text) {
  const std::string top = "graph JSON";
  const json root = parse_json(text, top);
  DT_CHECK(root.is_object() && root.contains("nodes") && root.at("nodes").is_array(), top,
           ": expected an object with a \"nodes\" array (format dtensor-graph/1)");
  DT_CHECK(static_cast<int64_t>(root.at("nodes").size()) <= kMaxGraphNodes, top, ": ", root.at("nodes").size(),
           " nodes; at most ", kMaxGraphNodes, " are accepted");
  const std::string format = optional_field<std::string>(root, "format", "dtensor-graph/1", top);
  DT_CHECK(format == "dtensor-graph/1", top, ": \"format\" is '", format, "'; accepted: dtensor-graph/1");
  GraphBuilder b(optional_field<std::string>(root, "name", "graph", top),
                 optional_field<std::string>(root, "description", "", top));
  const bool training = optional_field<bool>(root, "training", true, top);
  const std::string optimizer = optional_field<std::string>(root, "optimizer", "adamw", top);
  DT_CHECK(optimizer == "adamw" || optimizer == "sgd", top, ": \"optimizer\" is '", optimizer,
           "'; accepted: adamw, sgd");
  absl::flat_hash_map<std::string, std::vector<TensorId>> tensors;
  auto lookup = [&](const std::string& ref, const std::string& where) -> TensorId {
    std::string name = ref;
    int out = 0;
    auto colon = ref.rfind(':');
    if (colon != std::string::npos && !tensors.contains(ref)) {
      int o = 0;
      if (absl::SimpleAtoi(ref.substr(colon + 1), &o)) {
        name = ref.substr(0, colon);
        out = o;
      }
    }
    auto it = tensors.find(name);
    DT_CHECK(it != tensors.end(), where, ": unknown tensor '", ref, "' (tensors must be defined before use)");
    const int n = static_cast<int>(it->second.size());
    DT_CHECK(out >= 0 && out < n, where, ": '", ref, "' names output ", out, " of '", name, "', which has ", n,
             " output", n == 1 ? "" : "s", "; accepted: '", name, "' or '", name, ":K' with K in 0..", n - 1);
    return it->second[out];
  };
  int index = 0;
  for (const json& j : root.at("nodes")) {
    std::string where = "graph JSON: node " + std::to_string(index++);
    DT_CHECK(j.is_object() && j.contains("name") && j["name"].is_string(), where, ": needs a string \"name\"");
    const std::string name = j["name"].get<std::string>();
    where += " '" + name + "'";
    DT_CHECK(!tensors.contains(name), where, ": the name is used twice");
    const std::string kind = optional_field<std::string>(j, "kind", "op", where);
    const int64_t layer = optional_field<int64_t>(j, "layer", -1, where);
    DT_CHECK(layer >= -1 && layer <= kMaxLayerIndex, where, ": \"layer\" is ", layer, "; accepted: -1 (none) to ",
             kMaxLayerIndex);
    b.set_layer(static_cast<int>(layer));
    b.set_block(optional_field<std::string>(j, "block", "", where));
    b.set_fused(optional_field<bool>(j, "fused", false, where));
    if (kind == "input" || kind == "constant" || kind == "param") {
      DT_CHECK(j.contains("shape") && j["shape"].is_array(), where, ": needs \"shape\": [sizes]");
      DT_CHECK(j["shape"].size() <= static_cast<size_t>(kMaxTensorRank), where, ": shape has ", j["shape"].size(),
               " dims; at most ", kMaxTensorRank, " are accepted");
      Shape shape;
      int64_t numel = 1;
      for (const json& s : j["shape"]) {
        DT_CHECK(s.is_number_integer() && s.get<int64_t>() >= 0, where, ": shape sizes must be integers >= 0, not ",
                 s.dump().substr(0, 40));
        shape.push_back(s.get<int64_t>());
        numel = checked_mul(numel, shape.back(), "graph JSON: shape element count");
      }
      DType dt = DType::kBFloat16;
      if (j.contains("dtype")) {
        const std::string name = optional_field<std::string>(j, "dtype", "", where);
        try {
          dt = dtype_from_name(name);
        } catch (const std::exception& e) {
          DT_FAIL(where, ": ", e.what());
        }
      }
      DT_CHECK(numel <= kMaxTensorBytes / static_cast<int64_t>(itemsize(dt)), where, ": shape [", absl::StrJoin(shape, ", "), "] of ",
               dtype_name(dt), " is above the ", kMaxTensorBytes, "-byte limit on one tensor");
      TensorId t = kind == "input" ? b.input(name, shape, dt) : kind == "constant" ? b.constant(name, shape, dt)
                                                                                  : b.param(name, shape, dt);
      tensors[name] = {t};
      continue;
    }
    DT_CHECK(kind == "op", where, ": kind '", kind, "' is not one of input, constant, param, op");
    DT_CHECK(j.contains("op") && j["op"].is_string(), where, ": needs \"op\": an op name (dtensor plan --list-ops)");
    const std::string op = j["op"].get<std::string>();
    const OpDef* def = Registry::get().try_find(op);
    if (!def) Registry::get().find(op);  // throws, listing the registered ops
    auto convert = [&](const json& a, const ArgDef* arg, const std::string& w) -> BuildArg {
      if (arg && arg->type == ArgDef::kTensor) {
        if (a.is_null()) return IValue();
        DT_CHECK(a.is_string(), w, ": argument '", arg->name, "' is a Tensor: give a tensor name");
        return lookup(a.get<std::string>(), w);
      }
      if (arg && arg->type == ArgDef::kTensorList) {
        DT_CHECK(a.is_array(), w, ": argument '", arg->name, "' is a Tensor[]: give a list of tensor names");
        std::vector<TensorId> l;
        for (const json& e : a) {
          DT_CHECK(e.is_string(), w, ": argument '", arg->name, "' lists tensor names");
          l.push_back(lookup(e.get<std::string>(), w));
        }
        return l;
      }
      return json_ivalue(a, w);
    };
    std::vector<BuildArg> pos;
    if (j.contains("args")) {
      DT_CHECK(j["args"].is_array(), where, ": \"args\" must be a list");
      int i = 0;
      for (const json& a : j["args"]) {
        const ArgDef* arg = i < static_cast<int>(def->schema.args.size()) ? &def->schema.args[i] : nullptr;
        pos.push_back(convert(a, arg, where + " argument " + std::to_string(i)));
        ++i;
      }
    }
    std::vector<std::pair<std::string, BuildArg>> kw;
    if (j.contains("kwargs")) {
      DT_CHECK(j["kwargs"].is_object(), where, ": \"kwargs\" must be an object");
      for (auto& [k, a] : j["kwargs"].items()) {
        const int ai = def->schema.index_of(k);
        kw.push_back({k, convert(a, ai >= 0 ? &def->schema.args[ai] : nullptr, where + " kwarg " + k)});
      }
    }
    const std::string role = optional_field<std::string>(j, "role", "", where);
    DT_CHECK(role.empty() || role == "column" || role == "row" || role == "vocab" || role == "expert", where,
             ": \"role\" is '", role, "'; accepted: column, row, vocab, expert (planner/graph.h Node::role), or none");
    tensors[name] = b.op(name, op, pos, kw, role);
    if (j.contains("shapes")) check_traced_shapes(j["shapes"], tensors[name], b, *def, where);
  }
  return b.finish(training, optimizer);
}

}  // namespace dtensor::planner
