// ONNX import (planner/onnx_import.h): models built here with the protobuf API are planned; parameters
// are the initializers, matrix FLOPs are 2*M*N*K per MatMul/Gemm, an MLP gets Megatron's column/row
// split, unknown ops become opaque, and broken models are errors naming the value or node.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "planner/onnx_import.h"
#include "planner/search.h"

namespace dtensor::planner {
namespace {

struct Builder {
  onnx::ModelProto m;
  onnx::GraphProto* g;
  Builder() {
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(17);
    g = m.mutable_graph();
    g->set_name("test");
  }
  // dims: a size, or -1 for the symbolic dim "batch".
  void input(const std::string& name, const std::vector<int64_t>& dims, int type = onnx::TensorProto::FLOAT) {
    auto* v = g->add_input();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    for (int64_t d : dims) {
      auto* dim = t->mutable_shape()->add_dim();
      if (d < 0) dim->set_dim_param("batch");
      else dim->set_dim_value(d);
    }
  }
  // A float initializer of zeros (raw data), or int64 values.
  void weight(const std::string& name, const std::vector<int64_t>& dims) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) t->add_dims(d), n *= d;
    t->set_raw_data(std::string(static_cast<size_t>(n) * 4, '\0'));
    params += n;
  }
  void ints(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in,
                        const std::vector<std::string>& out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out.empty() ? op : out[0]);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return n;
  }
  static void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  void output(const std::string& name) { g->add_output()->set_name(name); }
  OnnxImport import(const OnnxImportOptions& o = {}) { return import_onnx(m.SerializeAsString(), "test", o); }
  int64_t params = 0;
};

// MatMul+Add+Gelu+MatMul on x[batch, 1024] (ONNX 1.12 has no Gelu schema, so its shape is the registry's).
Builder mlp(int64_t batch) {
  Builder b;
  b.input("x", {batch, 1024});
  b.weight("w1", {1024, 4096});
  b.weight("b1", {4096});
  b.weight("w2", {4096, 1024});
  b.node("MatMul", {"x", "w1"}, {"h"});
  b.node("Add", {"h", "b1"}, {"hb"});
  b.node("Gelu", {"hb"}, {"a"});
  b.node("MatMul", {"a", "w2"}, {"y"});
  b.output("y");
  return b;
}

// 2 * M * N * K summed over the matrix products (linear, matmul) of the graph.
double matrix_flops(const ModelGraph& g) {
  double f = 0;
  for (int v = 0; v < g.num_vertices(); ++v) {
    const Node& n = g.node(v);
    if (n.kind != NodeKind::kOp || (n.op != "linear" && n.op != "matmul")) continue;
    OpCall c = bind_vertex(g, v, Shape{1});
    const OpDef& d = Registry::get().find(n.op);
    f += d.cost.flops(c, n.outputs);
  }
  return f;
}

const Node& named(const ModelGraph& g, const std::string& name) {
  const int v = g.find(name);
  EXPECT_GE(v, 0) << name;
  return g.node(v);
}

TEST(OnnxImport, MlpGetsMegatronColumnRow) {
  Builder b = mlp(8);
  OnnxImport imp = b.import();
  const ModelGraph& g = imp.graph;
  EXPECT_TRUE(imp.opaque.empty()) << imp.opaque[0];
  EXPECT_EQ(g.num_parameters(), b.params);
  EXPECT_EQ(named(g, "h").op, "linear");
  EXPECT_EQ(named(g, "h").role, "column");
  EXPECT_EQ(named(g, "y").role, "row");
  EXPECT_EQ(named(g, "w1").outputs[0].shape, (Shape{4096, 1024}));  // stored as a linear weight
  EXPECT_DOUBLE_EQ(matrix_flops(g), 2.0 * 8 * 1024 * 4096 * 2);
  for (const char* mesh : {"tp=2", "tp=4"}) {
    Planner p(g, MeshSpec::parse(mesh), hardware_profile("h100-nvlink"));
    PlanResult r = p.run();
    const Strategy& fc1 = r.plan.at(g.find("h"))->strategy;
    const Strategy& fc2 = r.plan.at(g.find("y"))->strategy;
    EXPECT_EQ(fc1.inputs.at(1).at(0), Shard(0)) << mesh << ": " << fc1.str();
    EXPECT_EQ(fc2.inputs.at(1).at(0), Shard(1)) << mesh << ": " << fc2.str();
  }
}

TEST(OnnxImport, AttentionBlock) {
  const int64_t B = 2, S = 16, H = 4, D = 16, E = H * D;
  Builder b;
  b.input("x", {B, S, E});
  b.weight("ln.g", {E});
  b.weight("ln.b", {E});
  for (const char* w : {"wq", "wk", "wv", "wo"}) b.weight(w, {E, E});
  b.ints("heads", {B, S, H, D});  // an int64 initializer: a constant, not a parameter
  b.node("LayerNormalization", {"x", "ln.g", "ln.b"}, {"ln"});
  for (const char* p : {"q", "k", "v"}) {
    b.node("MatMul", {"ln", std::string("w") + p}, {p});
    b.node("Reshape", {p, "heads"}, {std::string(p) + "4"});
  }
  Builder::attr(b.node("Transpose", {"q4"}, {"qh"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
  Builder::attr(b.node("Transpose", {"k4"}, {"kt"}), "perm", std::vector<int64_t>{0, 2, 3, 1});
  Builder::attr(b.node("Transpose", {"v4"}, {"vh"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
  b.node("MatMul", {"qh", "kt"}, {"s"});
  Builder::attr(b.node("Softmax", {"s"}, {"p"}), "axis", int64_t{-1});
  b.node("MatMul", {"p", "vh"}, {"o"});
  Builder::attr(b.node("Transpose", {"o"}, {"ot"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
  // The merged shape through a Constant node (folded, no vertex).
  auto* c = b.node("Constant", {}, {"merged"});
  auto* a = c->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  a->mutable_t()->add_dims(3);
  for (int64_t d : {B, S, E}) a->mutable_t()->add_int64_data(d);
  b.node("Reshape", {"ot", "merged"}, {"om"});
  b.node("MatMul", {"om", "wo"}, {"proj"});
  b.node("Add", {"x", "proj"}, {"out"});
  b.output("out");
  OnnxImport imp = b.import();
  const ModelGraph& g = imp.graph;
  EXPECT_TRUE(imp.opaque.empty()) << imp.opaque[0];
  EXPECT_EQ(g.num_parameters(), b.params);
  for (const char* p : {"q", "k", "v"}) EXPECT_EQ(named(g, p).role, "column") << p;
  EXPECT_EQ(named(g, "proj").role, "row");
  EXPECT_EQ(named(g, "s").op, "matmul");
  EXPECT_EQ(named(g, "p").op, "softmax");
  EXPECT_EQ(named(g, "ln").op, "layer_norm");
  EXPECT_EQ(named(g, "out").outputs[0].shape, (Shape{B, S, E}));
  EXPECT_EQ(g.find("merged"), -1);
  EXPECT_DOUBLE_EQ(matrix_flops(g), 4 * 2.0 * B * S * E * E + 2 * 2.0 * B * H * S * S * D);
  for (const char* mesh : {"tp=2", "tp=4"}) {
    Planner p(g, MeshSpec::parse(mesh), hardware_profile("h100-nvlink"));
    EXPECT_GT(p.run().eval.step_time_us, 0) << mesh;
  }
}

TEST(OnnxImport, GemmTransBAndBias) {
  Builder b;
  b.input("x", {8, 256});
  b.weight("w", {512, 256});  // transB = 1: already [N, K]
  b.weight("c", {512});
  Builder::attr(b.node("Gemm", {"x", "w", "c"}, {"y"}), "transB", int64_t{1});
  b.node("Relu", {"y"}, {"r"});
  OnnxImport imp = b.import();
  EXPECT_EQ(named(imp.graph, "y").op, "linear");
  EXPECT_EQ(named(imp.graph, "w").outputs[0].shape, (Shape{512, 256}));
  EXPECT_EQ(imp.graph.num_parameters(), b.params);
  // linear prices its fused bias add too: M * N.
  EXPECT_DOUBLE_EQ(matrix_flops(imp.graph), 2.0 * 8 * 256 * 512 + 8 * 512);
}

TEST(OnnxImport, UnknownOpsAreOpaqueAndListed) {
  Builder b;
  b.input("x", {8, 64});
  b.node("Softsign", {"x"}, {"c"});  // known to ONNX, not mapped
  b.node("Relu", {"c"}, {"r"});
  OnnxImport imp = b.import();
  ASSERT_EQ(imp.opaque.size(), 1u);
  EXPECT_NE(imp.opaque[0].find("Softsign 'c'"), std::string::npos) << imp.opaque[0];
  EXPECT_EQ(named(imp.graph, "c").op, "opaque");
  EXPECT_EQ(named(imp.graph, "r").outputs[0].shape, (Shape{8, 64}));
  // An op ONNX does not know has no inferred shape: opaque needs one, so it is an error saying how.
  Builder c;
  c.input("x", {8, 64});
  c.node("MyCustomOp", {"x"}, {"y"})->set_domain("com.example");
  auto* custom = c.m.add_opset_import();
  custom->set_domain("com.example");
  custom->set_version(1);
  c.node("Relu", {"y"}, {"r"});
  std::string e;
  try {
    c.import();
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("'y' (output of a MyCustomOp node) has no tensor shape"), std::string::npos) << e;
  EXPECT_NE(e.find("value_info"), std::string::npos) << e;
  // With a value_info it is planned opaque.
  auto* vi = c.g->add_value_info();
  vi->set_name("y");
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {8, 32}) vi->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  OnnxImport ci = c.import();
  ASSERT_EQ(ci.opaque.size(), 1u);
  EXPECT_EQ(named(ci.graph, "r").outputs[0].shape, (Shape{8, 32}));
}

std::string error_of(Builder& b, const OnnxImportOptions& o = {}) {
  try {
    b.import(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OnnxImport, DynamicDimsNeedBinding) {
  Builder b = mlp(-1);
  std::string e = error_of(b);
  EXPECT_NE(e.find("'x' dim 0 is 'batch' (dynamic)"), std::string::npos) << e;
  EXPECT_NE(e.find("--onnx-dim batch=SIZE"), std::string::npos) << e;
  OnnxImportOptions o;
  parse_onnx_dim("batch=8", &o.dims);
  EXPECT_EQ(named(b.import(o).graph, "x").outputs[0].shape, (Shape{8, 1024}));
  for (const char* bad : {"batch", "=8", "batch=0", "batch=x", "batch=99999999999999999999"}) {
    try {
      parse_onnx_dim(bad, &o.dims);
      ADD_FAILURE() << bad;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("NAME=SIZE"), std::string::npos) << err.what();
    }
  }
}

// Window attributes ONNX's shape inference divides by: strides [0, 0] on a Conv or a MaxPool died with
// SIGFPE inside it; now an error naming the node and the attribute.
TEST(OnnxImport, ZeroOrNegativeWindowAttributesAreErrors) {
  struct Bad {
    const char* op;
    const char* attr;
    std::vector<int64_t> value;
  };
  for (const Bad& bad : {Bad{"Conv", "strides", {0, 0}}, Bad{"MaxPool", "strides", {0, 0}},
                         Bad{"Conv", "dilations", {0, 1}}, Bad{"MaxPool", "pads", {-1, 0, 0, 0}},
                         Bad{"Conv", "kernel_shape", {0, 3}}}) {
    SCOPED_TRACE(std::string(bad.op) + " " + bad.attr);
    Builder b;
    b.input("x", {1, 3, 8, 8});
    onnx::NodeProto* n;
    if (std::string(bad.op) == "Conv") {
      b.weight("w", {4, 3, 3, 3});
      n = b.node("Conv", {"x", "w"}, {"y"});
    } else {
      n = b.node("MaxPool", {"x"}, {"y"});
      if (std::string(bad.attr) != "kernel_shape") Builder::attr(n, "kernel_shape", std::vector<int64_t>{2, 2});
    }
    Builder::attr(n, bad.attr, bad.value);
    b.output("y");
    std::string e = error_of(b);
    EXPECT_NE(e.find(std::string("ONNX node 'y' (") + bad.op + "): attribute " + bad.attr), std::string::npos) << e;
  }
}

TEST(OnnxImport, BrokenModelsAreErrors) {
  EXPECT_THROW(import_onnx("not a model at all", "x", {}), Error);
  {
    Builder b = mlp(8);
    std::string bytes = b.m.SerializeAsString();
    bytes.resize(bytes.size() / 2);  // truncated
    EXPECT_THROW(import_onnx(bytes, "x", {}), Error);
  }
  {
    Builder b;
    b.input("x", {4, 4});
    b.node("Relu", {"x", }, {"a"});
    b.node("Add", {"a", "nowhere"}, {"c"});
    std::string e = error_of(b);
    EXPECT_NE(e.find("reads 'nowhere', which no node"), std::string::npos) << e;
  }
  {
    Builder b;
    b.input("x", {4, 4});
    b.node("Add", {"x", "d"}, {"c"});
    b.node("Relu", {"c"}, {"d"});
    std::string e = error_of(b);
    EXPECT_NE(e.find("cycle"), std::string::npos) << e;
  }
  {
    Builder b;
    b.input("x", {int64_t{1} << 40, int64_t{1} << 40});
    b.node("Relu", {"x"}, {"r"});
    std::string e = error_of(b);
    EXPECT_NE(e.find("'x': shape [1099511627776, 1099511627776] of float32 is above"), std::string::npos) << e;
  }
  {
    Builder b;
    b.input("x", {4, 4}, onnx::TensorProto::STRING);
    b.node("Identity", {"x"}, {"r"});
    std::string e = error_of(b);
    EXPECT_NE(e.find("element type STRING"), std::string::npos) << e;
  }
  for (const char* op : {"Identity", "MatMul", "Softmax"}) {
    Builder b;  // too few inputs (ONNX's inference says so first; the importer checks too)
    b.input("x", {4, 4});
    b.node(op, {}, {"i"});
    std::string e = error_of(b);
    EXPECT_NE(e.find("Input 0 is out of bounds"), std::string::npos) << e;
  }
  {
    Builder b;  // a custom domain's "MatMul" is not ONNX's: opaque (with the shape it is given)
    b.input("x", {4, 4});
    auto* d = b.m.add_opset_import();
    d->set_domain("com.example");
    d->set_version(1);
    b.node("MatMul", {"x"}, {"m"})->set_domain("com.example");
    auto* vi = b.g->add_value_info();
    vi->set_name("m");
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    vi->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
    OnnxImport r = b.import();
    ASSERT_EQ(r.opaque.size(), 1u);
    EXPECT_EQ(r.opaque[0], "com.example.MatMul 'm'");
  }
  {
    Builder b;
    b.input("x", {4, 4});
    b.node("Relu", {"x"}, {"r"});
    b.node("Relu", {"x"}, {"r"});
    std::string e = error_of(b);
    EXPECT_NE(e.find("'r' is defined twice"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace dtensor::planner
