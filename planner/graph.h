// Model graphs for the offline planner: a Boost.Graph directed graph whose vertices are
// graph inputs, parameters, registry ops and (for training) one optimizer update per parameter, and
// whose edges carry one tensor from an output of the producer to a tensor input of the consumer.
// Shapes and dtypes come from the registry: every op vertex is bound to its ATen schema
// (ops/registry.h) and its outputs are the op's meta function applied to its inputs.
//
// A training graph is forward + backward + optimizer update. The forward ops are vertices; each
// parameter has an optimizer vertex (op "adamw" or "sgd", edge parameter -> optimizer); the backward
// of every op is derived from its forward strategy (planner/cost.h) rather than searched, so it is not
// materialized as vertices.
//
// Units: shapes in elements. Errors: dtensor::Error naming the vertex and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "absl/container/flat_hash_set.h"

#include "ops/op_call.h"
#include "ops/registry.h"

namespace dtensor::planner {

enum class NodeKind : uint8_t {
  kInput,      // data fed to the step (tokens, images, targets): placement chosen by the plan
  kConstant,   // constant tables (masks, rotary tables, positions): materialized in any layout for free
  kParam,      // a trainable parameter: its storage placement is chosen by the plan
  kOp,         // a registry op
  kOptimizer,  // the optimizer update of one parameter (training graphs)
  // A tensor used by several ops (an op's or input's output slot with two or more op consumers):
  // the layout it is redistributed to once for all of them, and the layout its consumers'
  // gradients are summed in before they travel back (Megatron gathers a norm's output once for
  // q, k and v, and reduce-scatters the summed gradient once). Added by GraphBuilder::finish.
  kRedistribute,
};
// "input", "constant", "param", "op", "optimizer", "redistribute"
const char* node_kind_name(NodeKind k);
// Vertices whose tensor inputs are edges the plan prices: ops and redistributions.
inline bool takes_tensors(NodeKind k) { return k == NodeKind::kOp || k == NodeKind::kRedistribute; }

struct Node {
  NodeKind kind = NodeKind::kOp;
  std::string name;   // unique in the graph, e.g. "layers.3.attn.qkv"
  std::string op;     // registry op name (kOp); "adamw"/"sgd" (kOptimizer); kind name otherwise
  int layer = -1;     // index of the repeated layer (transformer block, ResNet block); -1 outside
  std::string block;  // "embed", "layer", "head", ... (for reports)
  // Megatron role of an op on the tensor-parallel mesh dim (for the hand-written baseline): "column"
  // (linear: weight rows split, input replicated), "row" (linear: weight columns split, output
  // Partial), "vocab" (embedding rows split), "expert" (grouped matmul: experts split), or "".
  std::string role;
  // Attention internals (scores, softmax): computed flash-attention style, neither saved for
  // backward nor written to memory.
  bool fused = false;
  std::vector<TensorMeta> outputs;
  // kOp: the arguments, tensor inputs as TensorRef/TensorListRef into the vertex's inputs (ordered by
  // Edge::input).
  std::vector<ArgValue> positional;
  std::vector<std::pair<std::string, ArgValue>> keyword;
  int num_inputs = 0;  // tensor inputs of an op vertex (1 for an optimizer vertex)
};

struct Edge {
  int output = 0;  // output slot of the producer
  int input = 0;   // tensor input index of the consumer
};

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, Node, Edge>;
using Vertex = Graph::vertex_descriptor;

// A tensor of the graph: output `output` of vertex `node`.
struct TensorId {
  int node = -1;
  int output = 0;
  bool operator==(const TensorId& o) const { return node == o.node && output == o.output; }
};

class ModelGraph {
 public:
  std::string name;         // "llama3-8b"
  std::string description;  // one line: the configuration
  bool training = true;
  std::string optimizer = "adamw";  // "adamw" (fp32 master + 2 moments) or "sgd" (fp32 master + momentum)
  Graph g;

  int num_vertices() const { return static_cast<int>(boost::num_vertices(g)); }
  const Node& node(int v) const { return g[static_cast<Vertex>(v)]; }
  // The producer (vertex, output slot) of each tensor input of v, by input index.
  std::vector<TensorId> inputs(int v) const;
  // Consumers of v's outputs: (consumer vertex, edge).
  std::vector<std::pair<int, Edge>> consumers(int v) const;
  const TensorMeta& meta(TensorId t) const { return node(t.node).outputs.at(t.output); }
  int find(const std::string& name) const;  // -1 when absent
  int optimizer_of(int param) const;        // -1 when none
  // A topological order (inputs first); throws dtensor::Error naming a vertex on a cycle.
  std::vector<int> topological_order() const;
  // Whether a tensor's gradient is needed (it depends on a parameter and is floating point).
  std::vector<char> requires_grad() const;  // per vertex (its outputs)
  int64_t num_parameters() const;           // elements
  int num_layers() const;                   // 1 + the largest layer index
};

// An argument given to GraphBuilder::op: a tensor, a list of tensors, or a plain value.
using BuildArg = std::variant<TensorId, std::vector<TensorId>, IValue>;

// Builds a ModelGraph op by op, computing shapes through the registry. Names are prefixed with the
// current scope ("layers.3." ...) and must be unique. Throws dtensor::Error (from the op's meta or
// schema) naming the op and its input shapes when arguments do not fit, or naming a repeated name.
class GraphBuilder {
 public:
  GraphBuilder(std::string name, std::string description);
  void set_layer(int layer) { layer_ = layer; }
  void set_block(std::string block) { block_ = std::move(block); }
  void set_scope(std::string scope) { scope_ = std::move(scope); }
  void set_fused(bool fused) { fused_ = fused; }

  TensorId input(const std::string& name, Shape shape, DType dtype);
  TensorId constant(const std::string& name, Shape shape, DType dtype);
  TensorId param(const std::string& name, Shape shape, DType dtype);
  std::vector<TensorId> op(const std::string& name, const std::string& op_name,
                           const std::vector<BuildArg>& positional,
                           const std::vector<std::pair<std::string, BuildArg>>& keyword = {},
                           const std::string& role = "");
  TensorId op1(const std::string& name, const std::string& op_name,
               const std::vector<BuildArg>& positional,
               const std::vector<std::pair<std::string, BuildArg>>& keyword = {},
               const std::string& role = "") {
    return op(name, op_name, positional, keyword, role).at(0);
  }
  const TensorMeta& meta(TensorId t) const { return graph_.meta(t); }
  // Finishes the graph: a redistribution vertex (NodeKind::kRedistribute, named "<tensor>.redistribute",
  // in its consumers' layer when they share one) between each op or input output used by two or more
  // ops and those ops; with `training`, one optimizer vertex per parameter.
  ModelGraph finish(bool training, const std::string& optimizer = "adamw");

 private:
  int add_vertex(Node n);
  void add_redistributions();
  ModelGraph graph_;
  absl::flat_hash_set<std::string> names_;  // for the uniqueness check (a sorted vector was quadratic)
  int layer_ = -1;
  std::string block_, scope_;
  bool fused_ = false;
};

// Binds op vertex v for a mesh of `mesh_shape` with every input Replicate (the planner's canonical
// call: strategies are enumerated from it).
OpCall bind_vertex(const ModelGraph& g, int v, const Shape& mesh_shape);

}  // namespace dtensor::planner
