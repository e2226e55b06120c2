#include "planner/onnx_import.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dispatch/dispatch.h"
#include "dtensor/core/limits.h"
#include "ops/registry.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

namespace dtensor::planner {
namespace {

// ONNX operator -> the registered ops naming it (OpDef::onnx), each with its count of required
// tensor arguments (the node's inputs, in order). Built once, after the ops are registered.
const std::unordered_map<std::string, std::vector<std::pair<std::string, int>>>& onnx_ops() {
  static const auto* index = [] {
    auto* m = new std::unordered_map<std::string, std::vector<std::pair<std::string, int>>>();
    const Registry& reg = Registry::get();
    for (const std::string& name : reg.names()) {
      const OpDef& op = reg.find(name);
      int tensors = 0;
      for (const ArgDef& a : op.schema.args)
        tensors += a.type == ArgDef::kTensor && !a.optional && !a.has_default;
      for (const std::string& o : op.onnx) (*m)[o].emplace_back(name, tensors);
    }
    return m;
  }();
  return *index;
}

// A graph larger than this many nodes is not a model the planner is meant for (Llama-70B exports
// have about 10^4); the bound keeps the maps and the topological sort small.

DType onnx_dtype(int t, const std::string& value) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DType::kFloat32;
    case onnx::TensorProto::DOUBLE: return DType::kFloat64;
    case onnx::TensorProto::FLOAT16: return DType::kFloat16;
    case onnx::TensorProto::BFLOAT16: return DType::kBFloat16;
    case onnx::TensorProto::INT64: return DType::kInt64;
    case onnx::TensorProto::INT32: return DType::kInt32;
    case onnx::TensorProto::INT16: return DType::kInt16;
    case onnx::TensorProto::INT8: return DType::kInt8;
    case onnx::TensorProto::UINT8: return DType::kUInt8;
    case onnx::TensorProto::BOOL: return DType::kBool;
    default:
      DT_FAIL("ONNX value '", value, "' has element type ", onnx::TensorProto::DataType_Name(t), " (", t,
              "); accepted: FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT64, INT32, INT16, INT8, UINT8, BOOL");
  }
}

struct Meta {
  Shape shape;
  DType dtype;
};

// Bounds a shape like graph_json does: rank and bytes within dtensor/core/limits.h.
void check_shape(const Shape& s, DType dt, const std::string& value) {
  DT_CHECK(static_cast<int64_t>(s.size()) <= kMaxTensorRank, "ONNX value '", value, "' has ", s.size(),
           " dims; at most ", kMaxTensorRank, " are accepted");
  const int64_t max_elems = kMaxTensorBytes / static_cast<int64_t>(itemsize(dt));
  int64_t n = 1;
  bool fits = true;
  for (int64_t d : s) {
    DT_CHECK(d >= 0, "ONNX value '", value, "' has a negative dim ", d);
    if (d > 0 && n > max_elems / d) fits = false;  // checked before multiplying: no overflow
    else n *= d;
  }
  DT_CHECK(fits, "ONNX value '", value, "': shape [", absl::StrJoin(s, ", "), "] of ", dtype_name(dt),
           " is above the ", kMaxTensorBytes, "-byte limit on one tensor");
}

class Importer {
 public:
  Importer(onnx::ModelProto& m, const std::string& name, const OnnxImportOptions& o)
      : m_(m), g_(m.graph()), o_(o), b_(name, "imported from ONNX") {}

  OnnxImport run() {
    DT_CHECK(g_.node_size() <= kMaxGraphNodes, "ONNX model: ", g_.node_size(), " nodes; at most ", kMaxGraphNodes,
             " are accepted");
    bind_dims();
    check_attributes(g_);
    try {
      onnx::shape_inference::InferShapes(m_);
    } catch (const std::exception& e) {
      DT_FAIL("ONNX model: shape inference failed: ", e.what());
    }
    for (const auto& v : g_.input()) types_[v.name()] = &v.type();
    for (const auto& v : g_.value_info()) types_[v.name()] = &v.type();
    for (const auto& v : g_.output()) types_[v.name()] = &v.type();
    for (const auto& t : g_.initializer()) {
      DT_CHECK(!t.name().empty(), "ONNX model: an initializer has no name");
      inits_[t.name()] = &t;
    }
    for (const auto& v : g_.input())
      if (!inits_.count(v.name())) {
        Meta mt = meta(v.name());
        tensors_[v.name()] = b_.input(v.name(), mt.shape, mt.dtype);
      }
    find_transposed_weights();
    for (int i : topological_order()) import_node(g_.node(i));
    OnnxImport r;
    r.graph = b_.finish(o_.training, o_.optimizer);
    r.opaque = std::move(opaque_);
    r.folded = folded_;
    return r;
  }

 private:
  // Symbolic dims of the graph inputs become sizes before inference propagates them.
  void bind_dims() {
    for (auto& v : *m_.mutable_graph()->mutable_input()) {
      if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) continue;
      for (auto& d : *v.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
        if (!d.has_dim_param()) continue;
        auto it = o_.dims.find(d.dim_param());
        if (it != o_.dims.end()) d.set_dim_value(it->second);
      }
    }
  }

  Meta meta(const std::string& value) {
    if (auto it = inits_.find(value); it != inits_.end()) {
      const onnx::TensorProto& t = *it->second;
      DType dt = onnx_dtype(t.data_type(), value);
      Shape s(t.dims().begin(), t.dims().end());
      check_shape(s, dt, value);
      return {s, dt};
    }
    auto it = types_.find(value);
    auto by = producer_op_.find(value);
    const std::string from = by == producer_op_.end() ? "" : " (output of a " + by->second + " node)";
    DT_CHECK(it != types_.end() && it->second->has_tensor_type() && it->second->tensor_type().has_shape(),
             "ONNX value '", value, "'", from,
             " has no tensor shape after ONNX shape inference (an op it does not know, or a sequence or map); "
             "the planner needs one: give the value a value_info with its shape");
    const auto& tt = it->second->tensor_type();
    DType dt = onnx_dtype(tt.elem_type(), value);
    DT_CHECK(tt.shape().dim_size() <= kMaxTensorRank, "ONNX value '", value, "' has ", tt.shape().dim_size(),
             " dims; at most ", kMaxTensorRank, " are accepted");
    Shape s;
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      DT_CHECK(!d.has_dim_param(), "ONNX value '", value, "' dim ", i, " is '", d.dim_param(),
               "' (dynamic); bind it with --onnx-dim ", d.dim_param(), "=SIZE");
      DT_CHECK(d.has_dim_value(), "ONNX value '", value, "' dim ", i,
               " is unknown after shape inference; the planner needs static shapes (--onnx-dim NAME=SIZE binds input dims)");
      s.push_back(d.dim_value());
    }
    check_shape(s, dt, value);
    return {s, dt};
  }

  // Kahn's algorithm over node inputs; a value nobody defines or a cycle is an error naming the node.
  std::vector<int> topological_order() {
    const int n = g_.node_size();
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < n; ++i)
      for (const std::string& out : g_.node(i).output()) {
        if (out.empty()) continue;
        DT_CHECK(!producer.count(out) && !inits_.count(out) && !tensors_.count(out), "ONNX model: value '", out,
                 "' is defined twice (node ", i, " '", g_.node(i).name(), "')");
        producer[out] = i;
        producer_op_[out] = g_.node(i).op_type();
      }
    std::vector<int> pending(n, 0);
    std::vector<std::vector<int>> users(n);
    for (int i = 0; i < n; ++i)
      for (const std::string& in : g_.node(i).input()) {
        if (in.empty() || inits_.count(in) || tensors_.count(in)) continue;
        auto it = producer.find(in);
        DT_CHECK(it != producer.end(), "ONNX model: node ", i, " '", g_.node(i).name(), "' (", g_.node(i).op_type(),
                 ") reads '", in, "', which no node, graph input or initializer defines");
        users[it->second].push_back(i);
        ++pending[i];
      }
    std::vector<int> order, ready;
    for (int i = n - 1; i >= 0; --i)
      if (pending[i] == 0) ready.push_back(i);
    while (!ready.empty()) {
      int i = ready.back();
      ready.pop_back();
      order.push_back(i);
      for (int u : users[i])
        if (--pending[u] == 0) ready.push_back(u);
    }
    if (static_cast<int>(order.size()) < n) {
      for (int i = 0; i < n; ++i)
        DT_CHECK(pending[i] == 0, "ONNX model: node ", i, " '", g_.node(i).name(), "' (", g_.node(i).op_type(),
                 ") is on a cycle (the graph must be acyclic)");
    }
    return order;
  }

  // 2-D float initializers used only as the B of MatMul or of Gemm without transB are stored as
  // linear weights [N, K]: the same elements, in the layout whose Megatron splits the planner knows.
  void find_transposed_weights() {
    std::unordered_map<std::string, int> other_uses;
    for (const auto& n : g_.node()) {
      const bool gemm_b = n.op_type() == "Gemm" && attr_int(n, "transB", 0) == 0;
      for (int i = 0; i < n.input_size(); ++i) {
        const std::string& in = input_of(n, i);
        if (!inits_.count(in)) continue;
        if (i == 1 && (n.op_type() == "MatMul" || gemm_b)) transposed_.insert(in);
        else ++other_uses[in];
      }
    }
    for (auto it = transposed_.begin(); it != transposed_.end();) {
      const onnx::TensorProto& t = *inits_.at(*it);
      if (other_uses.count(*it) || t.dims_size() != 2 || !is_param(t)) it = transposed_.erase(it);
      else ++it;
    }
  }

  // Element count of an initializer, saturated at kMaxTensorBytes + 1 (meta() rejects those);
  // 0 for a negative dim.
  static int64_t numel_of(const onnx::TensorProto& t) {
    int64_t n = 1;
    for (int64_t d : t.dims()) {
      if (d < 0) return 0;
      n = d == 0 ? 0 : n > kMaxTensorBytes / d ? kMaxTensorBytes + 1 : n * d;
    }
    return n;
  }

  static bool is_param(const onnx::TensorProto& t) {
    const int64_t n = numel_of(t);
    const int dt = t.data_type();
    return n > 1 && (dt == onnx::TensorProto::FLOAT || dt == onnx::TensorProto::DOUBLE ||
                     dt == onnx::TensorProto::FLOAT16 || dt == onnx::TensorProto::BFLOAT16);
  }

  // The window attributes ONNX's own shape inference divides by or sizes with, checked before it runs
  // (a Conv or MaxPool with strides [0, 0] died with SIGFPE inside it), in subgraphs too.
  static void check_attributes(const onnx::GraphProto& g) {
    constexpr int64_t kMaxWindow = int64_t{1} << 31;
    for (const auto& n : g.node())
      for (const auto& a : n.attribute()) {
        const std::string& name = a.name();
        const bool positive = name == "strides" || name == "dilations" || name == "kernel_shape" || name == "group";
        if (positive || name == "pads" || name == "output_padding") {
          std::vector<int64_t> v(a.ints().begin(), a.ints().end());
          if (a.type() == onnx::AttributeProto::INT) v.push_back(a.i());
          for (int64_t x : v)
            DT_CHECK(x >= (positive ? 1 : 0) && x <= kMaxWindow, "ONNX node '", n.name(), "' (", n.op_type(),
                     "): attribute ", name, " has ", x, "; accepted: ", positive ? 1 : 0, " to ", kMaxWindow);
        }
        if (a.has_g()) check_attributes(a.g());
        for (const auto& sub : a.graphs()) check_attributes(sub);
      }
  }

  // Input i of node n: a hostile node may have fewer inputs than its op needs (protobuf does not
  // bounds-check in release builds).
  static const std::string& input_of(const onnx::NodeProto& n, int i) {
    DT_CHECK(i >= 0 && i < n.input_size(), "node '", n.name(), "' (", n.op_type(), ") has ", n.input_size(),
             " inputs; input ", i, " is needed");
    return n.input(i);
  }

  static const onnx::AttributeProto* attr(const onnx::NodeProto& n, const char* name) {
    for (const auto& a : n.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  static int64_t attr_int(const onnx::NodeProto& n, const char* name, int64_t dflt) {
    const auto* a = attr(n, name);
    return a ? a->i() : dflt;
  }
  static std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const char* name) {
    const auto* a = attr(n, name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
  }

  bool is_static(const std::string& v) const {
    if (v.empty() || statics_.count(v)) return true;
    auto it = inits_.find(v);
    return it != inits_.end() && !is_param(*it->second);
  }

  // The tensor of value `v` as graph data: initializers and folded values get their vertex on first use.
  TensorId data(const std::string& v) {
    if (auto it = tensors_.find(v); it != tensors_.end()) return it->second;
    if (auto a = aliases_.find(v); a != aliases_.end()) return data(a->second);
    DT_CHECK(inits_.count(v) || statics_.count(v), "ONNX value '", v,
             "' is an extra output of a mapped node (e.g. LayerNormalization's Mean); the planner does not "
             "produce it");
    Meta mt = meta(v);
    TensorId t;
    if (auto it = inits_.find(v); it != inits_.end() && is_param(*it->second)) {
      if (transposed_.count(v)) std::swap(mt.shape[0], mt.shape[1]);
      t = b_.param(v, mt.shape, mt.dtype);
    } else {
      t = b_.constant(v, mt.shape, mt.dtype);
    }
    tensors_[v] = t;
    return t;
  }

  // Integer contents of a constant value (initializer or Constant node), when small and known.
  bool ints_of(const std::string& v, std::vector<int64_t>* out) {
    if (auto it = const_ints_.find(v); it != const_ints_.end()) return *out = it->second, true;
    auto it = inits_.find(v);
    return it != inits_.end() && tensor_ints(*it->second, out);
  }
  static bool tensor_ints(const onnx::TensorProto& t, std::vector<int64_t>* out) {
    const int64_t n = numel_of(t);
    if (n > 4096 || (n == 0 && t.dims_size() > 0)) return false;
    out->clear();
    if (t.data_type() == onnx::TensorProto::INT64) {
      if (t.has_raw_data()) {
        if (t.raw_data().size() != static_cast<size_t>(n) * 8) return false;
        out->resize(n);
        std::memcpy(out->data(), t.raw_data().data(), t.raw_data().size());
      } else {
        out->assign(t.int64_data().begin(), t.int64_data().end());
      }
    } else if (t.data_type() == onnx::TensorProto::INT32) {
      if (t.has_raw_data()) {
        if (t.raw_data().size() != static_cast<size_t>(n) * 4) return false;
        std::vector<int32_t> v(n);
        std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
        out->assign(v.begin(), v.end());
      } else {
        out->assign(t.int32_data().begin(), t.int32_data().end());
      }
    } else {
      return false;
    }
    return static_cast<int64_t>(out->size()) == n;
  }

  void import_node(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    DT_CHECK(n.output_size() >= 1 && !n.output(0).empty(), "ONNX model: node '", n.name(), "' (", op,
             ") has no output");
    const std::string& out = n.output(0);
    if (op == "Constant") {
      if (const auto* a = attr(n, "value")) {
        std::vector<int64_t> v;
        if (tensor_ints(a->t(), &v)) const_ints_[out] = v;
      }
      return fold(n);
    }
    if (op == "Identity" || op == "Dropout") {
      if (is_static(input_of(n, 0))) return fold(n);
      aliases_[out] = input_of(n, 0);
      ++folded_;
      return;
    }
    bool all_static = true;
    for (const std::string& in : n.input()) all_static &= is_static(in);
    if (op == "Shape" || op == "Size" || op == "ConstantOfShape" || all_static) return fold(n);
    // Ops of other domains are someone else's (Microsoft's Gelu is ONNX's later Gelu).
    const bool standard = n.domain().empty() || n.domain() == "ai.onnx" ||
                          (n.domain() == "com.microsoft" && op == "Gelu");
    std::string why;
    try {
      if (standard && map_node(n)) return;
    } catch (const std::exception& e) {  // the registry's check (dtensor::Error) or a bad attribute
      why = e.what();
    }
    make_opaque(n, why);
  }

  // A value computable before the step (constants, shapes): no vertex; a consumer that reads it as
  // data gets a constant vertex.
  void fold(const onnx::NodeProto& n) {
    for (const std::string& o : n.output()) statics_.insert(o);
    ++folded_;
  }

  void make_opaque(const onnx::NodeProto& n, const std::string& why) {
    std::vector<TensorId> ins;
    for (const std::string& in : n.input())
      if (!is_static(in)) ins.push_back(data(in));
    for (const std::string& o : n.output()) {
      if (o.empty()) continue;
      Meta mt = meta(o);
      tensors_[o] = b_.op1(o, "opaque",
                           {ins, IValue(std::vector<int64_t>(mt.shape.begin(), mt.shape.end())),
                            IValue(std::string(dtype_name(mt.dtype))), IValue(n.op_type())});
      split_[o] = false;
    }
    const bool standard = n.domain().empty() || n.domain() == "ai.onnx";
    opaque_.push_back(absl::StrCat(standard ? "" : n.domain() + ".", n.op_type(), " '", n.output(0), "'", why.empty() ? "" : " (", why,
                                   why.empty() ? "" : ")"));
  }

  // One output of node n from registry op `op`; the output is split (for roles) when any input is.
  void emit(const onnx::NodeProto& n, const std::string& op, const std::vector<BuildArg>& args,
            const std::vector<std::pair<std::string, BuildArg>>& kw = {}, const std::string& role = "") {
    const std::string& out = n.output(0);
    tensors_[out] = b_.op1(out, op, args, kw, role);
    bool split = false;
    for (const std::string& in : n.input()) split |= split_.count(in) && split_[in];
    split_[out] = role.empty() ? split : role == "column";
  }

  static int64_t wrap(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

  // The registry twin of node n; false when there is none (then opaque).
  bool map_node(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    const std::string& out = n.output(0);
    auto in = [&](int i) { return data(input_of(n, i)); };
    auto has = [&](int i) { return n.input_size() > i && !input_of(n, i).empty(); };
    // Operators with attributes first: Mod is remainder, or fmod with fmod=1; IsInf maps only when
    // it detects both signs (its default).
    if (op == "Mod" && n.input_size() == 2) {
      const auto* f = attr(n, "fmod");
      emit(n, f && f->i() != 0 ? "fmod" : "remainder", {in(0), in(1)});
      return true;
    }
    if (op == "IsInf") {
      const auto* pos = attr(n, "detect_positive");
      const auto* neg = attr(n, "detect_negative");
      if ((pos && pos->i() == 0) || (neg && neg->i() == 0)) return false;
      emit(n, "isinf", {in(0)});
      return true;
    }
    // The ops that name this operator (OpDef::onnx): inputs one to one, no attributes.
    if (const auto it = onnx_ops().find(op); it != onnx_ops().end() && n.attribute_size() == 0) {
      for (const auto& [name, tensors] : it->second) {
        if (n.input_size() != tensors) continue;
        if (tensors == 1) emit(n, name, {in(0)});
        else if (tensors == 2) emit(n, name, {in(0), in(1)});
        else if (tensors == 3) emit(n, name, {in(0), in(1), in(2)});
        else continue;  // no such op yet
        return true;
      }
    }
    if (op == "Gelu") {
      const auto* a = attr(n, "approximate");
      emit(n, "gelu", {in(0)}, {{"approximate", IValue(std::string(a && a->s() == "tanh" ? "tanh" : "none"))}});
      return true;
    }
    if (op == "Cast") {
      emit(n, "to", {in(0), IValue(std::string(dtype_name(onnx_dtype(attr_int(n, "to", 0), out))))});
      return true;
    }
    if (op == "Softmax" || op == "LogSoftmax") {
      const int64_t dflt = opset() >= 13 ? -1 : 1;
      emit(n, op == "Softmax" ? "softmax" : "log_softmax", {in(0), IValue(attr_int(n, "axis", dflt))});
      return true;
    }
    if (op == "MatMul" || op == "Gemm") return map_matmul(n);
    if (op == "LayerNormalization") {
      const Shape x = meta(input_of(n, 0)).shape;
      const int64_t axis = wrap(attr_int(n, "axis", -1), x.size());
      DT_CHECK(axis >= 0 && axis < static_cast<int64_t>(x.size()), "axis out of range");
      const auto* eps = attr(n, "epsilon");
      emit(n, "layer_norm",
           {in(0), IValue(std::vector<int64_t>(x.begin() + axis, x.end())), has(1) ? BuildArg(in(1)) : IValue(),
            has(2) ? BuildArg(in(2)) : IValue(), IValue(eps ? static_cast<double>(eps->f()) : 1e-5)});
      split_[out] = false;
      return true;
    }
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      // The inferred output shape says it all; the shape/axes inputs need not be folded.
      const Shape s = meta(out).shape;
      emit(n, "reshape", {in(0), IValue(std::vector<int64_t>(s.begin(), s.end()))});
      return true;
    }
    if (op == "Transpose") {
      std::vector<int64_t> perm = attr_ints(n, "perm");
      if (perm.empty())
        for (int64_t d = static_cast<int64_t>(meta(input_of(n, 0)).shape.size()) - 1; d >= 0; --d) perm.push_back(d);
      emit(n, "permute", {in(0), IValue(perm)});
      return true;
    }
    if (op == "Concat") {
      std::vector<TensorId> parts;
      for (int i = 0; i < n.input_size(); ++i) parts.push_back(in(i));
      emit(n, "cat", {parts, IValue(attr_int(n, "axis", 0))});
      return true;
    }
    if (op == "Split") return map_split(n);
    if (op == "Slice") return map_slice(n);
    if (op == "Gather") {
      // An embedding lookup: rows of a weight initializer picked by token ids.
      auto it = inits_.find(input_of(n, 0));
      if (it == inits_.end() || !is_param(*it->second) || it->second->dims_size() != 2 || attr_int(n, "axis", 0) != 0)
        return false;
      emit(n, "embedding", {in(0), in(1)}, {}, "");
      split_[out] = false;
      return true;
    }
    if (op == "ReduceMean" || op == "ReduceSum") {
      std::vector<int64_t> axes = attr_ints(n, "axes");
      if (has(1) && !ints_of(input_of(n, 1), &axes)) return false;
      const bool keep = attr_int(n, "keepdims", 1) != 0;
      emit(n, op == "ReduceMean" ? "mean" : "sum",
           {in(0), axes.empty() ? IValue() : IValue(axes), IValue(keep)});
      split_[out] = false;
      return true;
    }
    if (op == "Conv") return map_conv(n);
    return false;
  }

  int64_t opset() const {
    for (const auto& o : m_.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
    return 13;
  }

  bool map_matmul(const onnx::NodeProto& n) {
    const bool gemm = n.op_type() == "Gemm";
    DT_CHECK(n.input_size() >= 2, "needs 2 inputs");
    const std::string &a_name = input_of(n, 0), &w_name = input_of(n, 1);
    TensorId a = data(a_name);
    if (gemm && attr_int(n, "transA", 0) != 0) a = b_.op1(n.output(0) + ".transA", "t", {a});
    const bool weight = inits_.count(w_name) && is_param(*inits_.at(w_name)) && inits_.at(w_name)->dims_size() == 2 &&
                        (transposed_.count(w_name) || (gemm && attr_int(n, "transB", 0) != 0));
    const bool a_split = split_.count(a_name) && split_[a_name];
    const std::string& out = n.output(0);
    if (!weight) {
      TensorId w = data(w_name);
      if (gemm && attr_int(n, "transB", 0) != 0) w = b_.op1(out + ".transB", "t", {w});
      const std::string mm = gemm && n.input_size() > 2 && !input_of(n, 2).empty() ? out + ".mm" : out;
      tensors_[mm] = b_.op1(mm, "matmul", {a, w});
      split_[mm] = a_split || (split_.count(w_name) && split_[w_name]);
      if (mm != out) {
        tensors_[out] = b_.op1(out, "add", {tensors_[mm], data(input_of(n, 2))});
        split_[out] = split_[mm];
      }
      return true;
    }
    const std::string role = a_split ? "row" : "column";
    BuildArg bias = IValue();
    bool bias_after = false;
    if (gemm && n.input_size() > 2 && !input_of(n, 2).empty()) {
      const Shape c = meta(input_of(n, 2)).shape;
      const Shape w = meta(w_name).shape;
      const int64_t n_out = transposed_.count(w_name) ? w[1] : w[0];
      if (c == Shape{n_out}) bias = data(input_of(n, 2));
      else bias_after = true;
    }
    const std::string lin = bias_after ? out + ".linear" : out;
    tensors_[lin] = b_.op1(lin, "linear", {a, data(w_name), bias}, {}, role);
    split_[lin] = role == "column";
    if (bias_after) {
      tensors_[out] = b_.op1(out, "add", {tensors_[lin], data(input_of(n, 2))});
      split_[out] = split_[lin];
    }
    return true;
  }

  bool map_split(const onnx::NodeProto& n) {
    const Shape x = meta(input_of(n, 0)).shape;
    const int64_t axis = wrap(attr_int(n, "axis", 0), x.size());
    if (axis < 0 || axis >= static_cast<int64_t>(x.size())) return false;
    std::vector<int64_t> sizes;
    for (const std::string& o : n.output()) {
      if (o.empty()) return false;
      sizes.push_back(meta(o).shape.at(axis));
    }
    // The registry's split takes one size: equal parts (the last may be smaller).
    for (size_t i = 0; i + 1 < sizes.size(); ++i)
      if (sizes[i] != sizes[0]) return false;
    if (sizes.empty() || sizes[0] <= 0 || sizes.back() > sizes[0]) return false;
    std::vector<TensorId> outs = b_.op(n.output(0), "split", {data(input_of(n, 0)), IValue(sizes[0]), IValue(axis)});
    if (outs.size() != sizes.size()) DT_FAIL("split made ", outs.size(), " parts, ONNX has ", sizes.size());
    const bool split = split_.count(input_of(n, 0)) && split_[input_of(n, 0)];
    for (size_t i = 0; i < outs.size(); ++i) {
      tensors_[n.output(i)] = outs[i];
      split_[n.output(i)] = split;
    }
    return true;
  }

  bool map_slice(const onnx::NodeProto& n) {
    std::vector<int64_t> starts, ends, axes, steps;
    if (n.input_size() < 3 || !ints_of(input_of(n, 1), &starts) || !ints_of(input_of(n, 2), &ends)) return false;
    if (n.input_size() > 3 && !input_of(n, 3).empty() && !ints_of(input_of(n, 3), &axes)) return false;
    if (n.input_size() > 4 && !input_of(n, 4).empty() && !ints_of(input_of(n, 4), &steps)) return false;
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) return false;
    const Shape x = meta(input_of(n, 0)).shape;
    TensorId t = data(input_of(n, 0));
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t ax = wrap(axes[i], x.size());
      if (ax < 0 || ax >= static_cast<int64_t>(x.size()) || steps[i] < 1) return false;
      // ONNX clamps like Python slicing; INT64_MAX means "to the end".
      const int64_t dim = x[ax];
      auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? std::max(v, -dim) + dim : v, int64_t{0}, dim); };
      const std::string name = i + 1 == starts.size() ? n.output(0) : absl::StrCat(n.output(0), ".", i);
      t = b_.op1(name, "slice", {t, IValue(ax), IValue(clamp(starts[i])), IValue(clamp(ends[i])), IValue(steps[i])});
    }
    tensors_[n.output(0)] = t;
    split_[n.output(0)] = split_.count(input_of(n, 0)) && split_[input_of(n, 0)];
    return true;
  }

  bool map_conv(const onnx::NodeProto& n) {
    const auto* pad_mode = attr(n, "auto_pad");
    if (pad_mode && pad_mode->s() != "NOTSET") return false;
    const Shape w = meta(input_of(n, 1)).shape;
    if (w.size() < 3) return false;
    const size_t sd = w.size() - 2;
    std::vector<int64_t> pads = attr_ints(n, "pads"), stride = attr_ints(n, "strides"),
                         dil = attr_ints(n, "dilations");
    if (pads.empty()) pads.assign(2 * sd, 0);
    if (stride.empty()) stride.assign(sd, 1);
    if (dil.empty()) dil.assign(sd, 1);
    if (pads.size() != 2 * sd) return false;
    // The registry's convolution pads symmetrically.
    for (size_t i = 0; i < sd; ++i)
      if (pads[i] != pads[i + sd]) return false;
    pads.resize(sd);
    const bool bias = n.input_size() > 2 && !input_of(n, 2).empty();
    emit(n, "convolution",
         {data(input_of(n, 0)), data(input_of(n, 1)), bias ? BuildArg(data(input_of(n, 2))) : IValue(), IValue(stride),
          IValue(pads), IValue(dil), IValue(false), IValue(std::vector<int64_t>(sd, 0)),
          IValue(attr_int(n, "group", 1))});
    split_[n.output(0)] = false;
    return true;
  }

  onnx::ModelProto& m_;
  const onnx::GraphProto& g_;
  const OnnxImportOptions& o_;
  GraphBuilder b_;
  std::unordered_map<std::string, const onnx::TypeProto*> types_;
  std::unordered_map<std::string, const onnx::TensorProto*> inits_;
  std::unordered_map<std::string, TensorId> tensors_;
  std::unordered_map<std::string, std::string> aliases_;
  std::unordered_map<std::string, std::string> producer_op_;  // value -> op type (for messages)
  std::unordered_map<std::string, std::vector<int64_t>> const_ints_;
  std::unordered_map<std::string, bool> split_;  // split by a column linear (for the next one's role)
  std::unordered_set<std::string> statics_, transposed_;
  std::vector<std::string> opaque_;
  int folded_ = 0;
};

}  // namespace

OnnxImport import_onnx(const std::string& bytes, const std::string& name, const OnnxImportOptions& o) {
  init_ops();  // every family, the planned one included
  onnx::ModelProto m;
  DT_CHECK(m.ParseFromString(bytes), "not an ONNX model: the file does not parse as an onnx.ModelProto (",
           bytes.size(), " bytes)");
  DT_CHECK(m.has_graph(), "ONNX model: no graph");
  try {
    return Importer(m, name, o).run();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // from the ONNX library on a malformed model
    DT_FAIL("ONNX model: ", e.what());
  }
}

void parse_onnx_dim(const std::string& text, std::map<std::string, int64_t>* dims) {
  const auto eq = text.find('=');
  int64_t v = 0;
  DT_CHECK(eq != std::string::npos && eq > 0 && absl::SimpleAtoi(text.substr(eq + 1), &v) && v >= 1 &&
               v <= kMaxTensorBytes,
           "--onnx-dim '", text, "': accepted: NAME=SIZE with SIZE in [1, ", kMaxTensorBytes, "]");
  (*dims)[text.substr(0, eq)] = v;
}

}  // namespace dtensor::planner
