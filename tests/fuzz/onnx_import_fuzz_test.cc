// Fuzzes the ONNX importer (`dtensor plan --onnx`, planner/onnx_import.h) with byte mutations of
// small serialized models: every input is either a graph or a dtensor::Error; no other exception,
// crash or hang. The seeds are built here with the protobuf API (binary, so no corpus file).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "planner/onnx_import.h"
#include "tests/fuzz/fuzz_driver.h"

namespace dtensor::planner {
namespace {

struct Seed {
  onnx::ModelProto m;
  onnx::GraphProto* g = m.mutable_graph();
  Seed() {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
  }
  void value(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims, int type) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void input(const std::string& name, const std::vector<int64_t>& dims, int type = onnx::TensorProto::FLOAT) {
    value(g->add_input(), name, dims, type);
  }
  void init(const std::string& name, const std::vector<int64_t>& dims, int type = onnx::TensorProto::FLOAT,
            const std::vector<int64_t>& ints = {}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    int64_t n = 1;
    for (int64_t d : dims) t->add_dims(d), n *= d;
    if (type == onnx::TensorProto::INT64) {
      for (int64_t x : ints) t->add_int64_data(x);
    } else {
      t->set_raw_data(std::string(static_cast<size_t>(n) * 4, '\0'));
    }
  }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return n;
  }
  static void ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
};

std::vector<std::string> seeds() {
  Seed a;  // an MLP with a Gemm
  a.input("x", {4, 16});
  a.init("w1", {16, 32});
  a.init("b1", {32});
  a.init("w2", {16, 32});
  a.node("MatMul", {"x", "w1"}, {"h"});
  a.node("Add", {"h", "b1"}, {"hb"});
  a.node("Relu", {"hb"}, {"r"});
  auto* gemm = a.node("Gemm", {"r", "w2"}, {"y"});
  auto* tb = gemm->add_attribute();
  tb->set_name("transB");
  tb->set_type(onnx::AttributeProto::INT);
  tb->set_i(1);
  Seed b;  // attention-shaped: layer norm, heads, softmax, split, slice, embedding, reduce, conv
  b.input("ids", {2, 8}, onnx::TensorProto::INT64);
  b.input("img", {1, 3, 8, 8});
  b.init("emb", {50, 16});
  b.init("ln.g", {16});
  b.init("wq", {16, 16});
  b.init("heads", {4}, onnx::TensorProto::INT64, {2, 8, 4, 4});
  b.init("starts", {1}, onnx::TensorProto::INT64, {1});
  b.init("ends", {1}, onnx::TensorProto::INT64, {4});
  b.init("axes", {1}, onnx::TensorProto::INT64, {1});
  b.init("conv.w", {4, 3, 3, 3});
  b.node("Gather", {"emb", "ids"}, {"e"});
  b.node("LayerNormalization", {"e", "ln.g"}, {"ln"});
  b.node("MatMul", {"ln", "wq"}, {"q"});
  b.node("Reshape", {"q", "heads"}, {"q4"});
  Seed::ints(b.node("Transpose", {"q4"}, {"qh"}), "perm", {0, 2, 1, 3});
  b.node("Softmax", {"qh"}, {"p"});
  b.node("Split", {"p"}, {"p0", "p1"});
  b.node("Slice", {"p0", "starts", "ends", "axes"}, {"sl"});
  b.node("ReduceMean", {"sl", "axes"}, {"m"});
  b.node("Shape", {"m"}, {"shape"});
  Seed::ints(b.node("Conv", {"img", "conv.w"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Softsign", {"c"}, {"cos"});
  return {a.m.SerializeAsString(), b.m.SerializeAsString()};
}

TEST(OnnxImportFuzz, EveryInputIsAGraphOrAnError) {
  std::vector<std::string> corpus = seeds();
  for (const std::string& s : corpus) ASSERT_NO_THROW(import_onnx(s, "seed", {})) << "a seed must import";
  // The seeds exercise the mappings, not the opaque fallback (Softsign has no mapping).
  const OnnxImport b = import_onnx(corpus[1], "seed", {});
  ASSERT_EQ(b.opaque.size(), 1u) << b.opaque[0];
  EXPECT_EQ(b.opaque[0], "Softsign 'cos'");
  for (const char* v : {"e", "sl", "m", "c", "p0"}) EXPECT_GE(b.graph.find(v), 0) << v;
  EXPECT_EQ(b.graph.node(b.graph.find("e")).op, "embedding");
  EXPECT_EQ(b.graph.node(b.graph.find("c")).op, "convolution");
  fuzz::Mutator m(corpus, 20261124);
  fuzz::Counts c = fuzz::run_fuzz("onnx_import", m, fuzz::fuzz_runs(20000), [](const std::string& in, std::string* why) {
    return fuzz::accept_or_error([&](std::string*) {
      import_onnx(in, "fuzz", {});
      return fuzz::Outcome::kAccepted;
    }, why);
  });
  EXPECT_EQ(c.failed, 0) << c.first_failure;
  EXPECT_GT(c.accepted, 0) << "no input got past the checks: the mutations are too coarse to test anything";
}

}  // namespace
}  // namespace dtensor::planner
