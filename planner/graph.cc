#include "planner/graph.h"

#include <algorithm>

#include <boost/graph/topological_sort.hpp>

#include "dispatch/dispatch.h"
#include "dtensor/core/error.h"
#include "dtensor/core/limits.h"

namespace dtensor::planner {

const char* node_kind_name(NodeKind k) {
  switch (k) {
    case NodeKind::kInput: return "input";
    case NodeKind::kConstant: return "constant";
    case NodeKind::kParam: return "param";
    case NodeKind::kOp: return "op";
    case NodeKind::kOptimizer: return "optimizer";
    case NodeKind::kRedistribute: return "redistribute";
  }
  return "?";
}

std::vector<TensorId> ModelGraph::inputs(int v) const {
  std::vector<TensorId> in(node(v).num_inputs);
  for (auto [it, end] = boost::in_edges(static_cast<Vertex>(v), g); it != end; ++it) {
    const Edge& e = g[*it];
    DT_CHECK(e.input >= 0 && e.input < static_cast<int>(in.size()), "model graph: vertex '", node(v).name,
             "' has an edge into input ", e.input, " of ", in.size());
    in[e.input] = {static_cast<int>(boost::source(*it, g)), e.output};
  }
  for (size_t i = 0; i < in.size(); ++i)
    DT_CHECK(in[i].node >= 0, "model graph: input ", i, " of vertex '", node(v).name, "' is not connected");
  return in;
}

std::vector<std::pair<int, Edge>> ModelGraph::consumers(int v) const {
  std::vector<std::pair<int, Edge>> out;
  for (auto [it, end] = boost::out_edges(static_cast<Vertex>(v), g); it != end; ++it)
    out.push_back({static_cast<int>(boost::target(*it, g)), g[*it]});
  return out;
}

int ModelGraph::find(const std::string& n) const {
  for (int v = 0; v < num_vertices(); ++v)
    if (node(v).name == n) return v;
  return -1;
}

int ModelGraph::optimizer_of(int param) const {
  for (auto& [c, e] : consumers(param))
    if (node(c).kind == NodeKind::kOptimizer) return c;
  return -1;
}

std::vector<int> ModelGraph::topological_order() const {
  std::vector<Vertex> rev;
  try {
    boost::topological_sort(g, std::back_inserter(rev));
  } catch (const boost::not_a_dag&) {
    DT_FAIL("model graph '", name, "' has a cycle; a model graph must be acyclic");
  }
  std::vector<int> order(rev.rbegin(), rev.rend());
  return order;
}

std::vector<char> ModelGraph::requires_grad() const {
  std::vector<char> rg(num_vertices(), 0);
  for (int v : topological_order()) {
    const Node& n = node(v);
    if (n.kind == NodeKind::kParam) {
      rg[v] = 1;
    } else if (takes_tensors(n.kind)) {
      bool any = false;
      for (const TensorId& t : inputs(v)) any |= rg[t.node] != 0;
      rg[v] = any && !n.outputs.empty() && is_floating(n.outputs[0].dtype);
    }
  }
  return rg;
}

int64_t ModelGraph::num_parameters() const {
  int64_t total = 0;
  for (int v = 0; v < num_vertices(); ++v)
    if (node(v).kind == NodeKind::kParam) total += numel(node(v).outputs[0].shape);
  return total;
}

int ModelGraph::num_layers() const {
  int n = 0;
  for (int v = 0; v < num_vertices(); ++v) n = std::max(n, node(v).layer + 1);
  return n;
}

GraphBuilder::GraphBuilder(std::string name, std::string description) {
  init_ops();  // every family, the planned one included
  graph_.name = std::move(name);
  graph_.description = std::move(description);
}

int GraphBuilder::add_vertex(Node n) {
  n.name = scope_ + n.name;
  // Every tensor of the graph, given or computed, stays within the engine's size limits, so the cost
  // model's byte counts (bytes x ranks) cannot overflow.
  for (const TensorMeta& m : n.outputs) {
    DT_CHECK(static_cast<int64_t>(m.shape.size()) <= kMaxTensorRank, "model graph: '", n.name, "' has ",
             m.shape.size(), " dims; at most ", kMaxTensorRank, " are accepted");
    DT_CHECK(numel(m.shape) <= kMaxTensorBytes / static_cast<int64_t>(itemsize(m.dtype)), "model graph: '", n.name,
             "' of shape ", shape_str(m.shape), " (", dtype_name(m.dtype), ") is larger than ", kMaxTensorBytes,
             " bytes, the largest tensor accepted");
  }
  DT_CHECK(names_.insert(n.name).second, "model graph: the name '", n.name, "' is used twice");
  n.layer = layer_;
  n.block = block_;
  return static_cast<int>(boost::add_vertex(std::move(n), graph_.g));
}

TensorId GraphBuilder::input(const std::string& name, Shape shape, DType dtype) {
  Node n;
  n.kind = NodeKind::kInput;
  n.name = name;
  n.op = "input";
  n.outputs = {{std::move(shape), dtype}};
  return {add_vertex(std::move(n)), 0};
}

TensorId GraphBuilder::constant(const std::string& name, Shape shape, DType dtype) {
  Node n;
  n.kind = NodeKind::kConstant;
  n.name = name;
  n.op = "constant";
  n.outputs = {{std::move(shape), dtype}};
  return {add_vertex(std::move(n)), 0};
}

TensorId GraphBuilder::param(const std::string& name, Shape shape, DType dtype) {
  Node n;
  n.kind = NodeKind::kParam;
  n.name = name;
  n.op = "param";
  n.outputs = {{std::move(shape), dtype}};
  return {add_vertex(std::move(n)), 0};
}

std::vector<TensorId> GraphBuilder::op(const std::string& name, const std::string& op_name,
                                       const std::vector<BuildArg>& positional,
                                       const std::vector<std::pair<std::string, BuildArg>>& keyword,
                                       const std::string& role) {
  const OpDef* def = Registry::get().try_find(op_name);
  DT_CHECK(def, "model graph: op '", scope_ + name, "' uses '", op_name, "', which the registry does not have");
  Node n;
  n.kind = NodeKind::kOp;
  n.name = name;
  n.op = op_name;
  n.role = role;
  n.fused = fused_;
  std::vector<TensorId> ins;
  std::vector<TensorMeta> metas;
  auto convert = [&](const BuildArg& a) -> ArgValue {
    if (auto* t = std::get_if<TensorId>(&a)) {
      ins.push_back(*t);
      metas.push_back(graph_.meta(*t));
      return TensorRef{static_cast<int>(ins.size()) - 1};
    }
    if (auto* l = std::get_if<std::vector<TensorId>>(&a)) {
      TensorListRef r;
      for (const TensorId& t : *l) {
        ins.push_back(t);
        metas.push_back(graph_.meta(t));
        r.indices.push_back(static_cast<int>(ins.size()) - 1);
      }
      return r;
    }
    return std::get<IValue>(a);
  };
  for (const BuildArg& a : positional) n.positional.push_back(convert(a));
  for (const auto& [k, a] : keyword) n.keyword.push_back({k, convert(a)});
  n.num_inputs = static_cast<int>(ins.size());
  try {
    std::vector<Placements> pl(metas.size(), Placements{Replicate()});
    OpCall call = OpCall::bind(*def, n.positional, n.keyword, metas, pl, Shape{1});
    n.outputs = def->meta(call);
  } catch (const Error& e) {
    DT_FAIL("model graph: op '", scope_ + name, "': ", e.what());
  }
  const int v = add_vertex(std::move(n));
  for (size_t i = 0; i < ins.size(); ++i)
    boost::add_edge(static_cast<Vertex>(ins[i].node), static_cast<Vertex>(v),
                    Edge{ins[i].output, static_cast<int>(i)}, graph_.g);
  std::vector<TensorId> outs;
  for (size_t o = 0; o < graph_.node(v).outputs.size(); ++o) outs.push_back({v, static_cast<int>(o)});
  return outs;
}

ModelGraph GraphBuilder::finish(bool training, const std::string& optimizer) {
  DT_CHECK(optimizer == "adamw" || optimizer == "sgd", "model graph: optimizer '", optimizer,
           "' is not supported; accepted: adamw, sgd");
  graph_.training = training;
  graph_.optimizer = optimizer;
  add_redistributions();
  if (training) {
    const int n = graph_.num_vertices();
    for (int v = 0; v < n; ++v) {
      const Node& p = graph_.node(v);
      if (p.kind != NodeKind::kParam) continue;
      Node o;
      o.kind = NodeKind::kOptimizer;
      o.name = p.name + ".opt";
      o.op = optimizer;
      o.layer = p.layer;
      o.block = p.block;
      o.num_inputs = 1;
      const int ov = static_cast<int>(boost::add_vertex(std::move(o), graph_.g));
      boost::add_edge(static_cast<Vertex>(v), static_cast<Vertex>(ov), Edge{0, 0}, graph_.g);
    }
  }
  graph_.topological_order();  // rejects cycles
  return std::move(graph_);
}

void GraphBuilder::add_redistributions() {
  Graph& g = graph_.g;
  const int n = graph_.num_vertices();
  for (int u = 0; u < n; ++u) {
    // Copies, not a reference: add_vertex below reallocates the vertex storage.
    const NodeKind kind = graph_.node(u).kind;
    const int num_outputs = static_cast<int>(graph_.node(u).outputs.size());
    if (kind != NodeKind::kOp && kind != NodeKind::kInput) continue;
    for (int slot = 0; slot < num_outputs; ++slot) {
      std::vector<std::pair<int, Edge>> uses;
      for (auto& [c, e] : graph_.consumers(u))
        if (e.output == slot && graph_.node(c).kind == NodeKind::kOp) uses.push_back({c, e});
      if (uses.size() < 2) continue;
      Node r;
      r.kind = NodeKind::kRedistribute;
      r.op = "redistribute";
      r.name = graph_.node(u).name + (slot > 0 ? ":" + std::to_string(slot) : "") + ".redistribute";
      for (int i = 2; names_.contains(r.name); ++i)
        r.name = graph_.node(u).name + ".redistribute_" + std::to_string(i);
      names_.insert(r.name);
      r.layer = graph_.node(uses[0].first).layer;
      r.block = graph_.node(uses[0].first).block;
      for (auto& [c, e] : uses) {
        if (graph_.node(c).layer != r.layer) r.layer = -1;
        if (graph_.node(c).block != r.block) r.block = graph_.node(u).block;
      }
      r.fused = graph_.node(u).fused;  // a fused op's output cannot move: nor can its redistribution's
      r.outputs = {graph_.node(u).outputs[slot]};
      r.num_inputs = 1;
      const Vertex rv = boost::add_vertex(std::move(r), g);
      boost::remove_out_edge_if(
          static_cast<Vertex>(u),
          [&](const Graph::edge_descriptor& e) {
            return g[e].output == slot && graph_.node(static_cast<int>(boost::target(e, g))).kind == NodeKind::kOp;
          },
          g);
      boost::add_edge(static_cast<Vertex>(u), rv, Edge{slot, 0}, g);
      for (auto& [c, e] : uses) boost::add_edge(rv, static_cast<Vertex>(c), Edge{0, e.input}, g);
    }
  }
}

OpCall bind_vertex(const ModelGraph& g, int v, const Shape& mesh_shape) {
  const Node& n = g.node(v);
  DT_CHECK(n.kind == NodeKind::kOp, "model graph: vertex '", n.name, "' is not an op");
  std::vector<TensorMeta> metas;
  for (const TensorId& t : g.inputs(v)) metas.push_back(g.meta(t));
  std::vector<Placements> pl(metas.size(), Placements(mesh_shape.size(), Replicate()));
  return OpCall::bind(Registry::get().find(n.op), n.positional, n.keyword, std::move(metas), std::move(pl),
                      mesh_shape);
}

}  // namespace dtensor::planner
