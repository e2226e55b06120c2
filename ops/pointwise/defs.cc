// Pointwise ops: torch broadcasting and type promotion; local kernels run on local blocks as they are
// (strategies only pair blocks that line up).
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

// A Scalar argument as given: an int stays an int (add/sub on int64 tensors accept only an integer
// alpha, and the default alpha=1 is one).
Scalar scalar_arg(const OpCall& c, const std::string& name) {
  const IValue& v = c.value(name);
  if (const auto* i = std::get_if<int64_t>(&v)) return Scalar(*i);
  return Scalar(c.get_double(name));
}

// Output metadata of an op broadcasting all tensor inputs; dtype from `dtype_fn`.
MetaFn broadcast_meta(std::function<DType(const OpCall&)> dtype_fn) {
  return [dtype_fn](const OpCall& c) {
    return guard(c, [&] {
      Shape s = c.tensor(0).shape;
      for (int t = 1; t < c.num_tensors(); ++t) s = kernels::broadcast_shapes(s, c.tensor(t).shape);
      return std::vector<TensorMeta>{{s, dtype_fn(c)}};
    });
  };
}

DType promoted(const OpCall& c) {
  DType d = c.tensor(0).dtype;
  for (int t = 1; t < c.num_tensors(); ++t) d = kernels::promote_types(d, c.tensor(t).dtype);
  return d;
}
DType same(const OpCall& c) { return c.tensor(0).dtype; }
DType boolean(const OpCall&) { return DType::kBool; }
DType floating(const OpCall& c) {
  DType d = promoted(c);
  return is_floating(d) || is_complex(d) ? d : DType::kFloat32;
}

std::vector<Sample> binary_samples() {
  return {sample({{6, 5}, {6, 5}}, {T(0), T(1)}), sample({{4, 7, 3}, {7, 1}}, {T(0), T(1)}),
          sample({{5}, {3, 5}}, {T(0), T(1)})};
}
std::vector<Sample> unary_samples() {
  return {sample({{6, 5}}, {T(0)}), sample({{3, 7, 2}}, {T(0)})};
}

OpDef& binary(Registry& reg, const std::string& schema, MetaFn meta, KernelFn k, OpCost c) {
  OpDef& op = reg.define(schema, "pointwise");
  op.meta = std::move(meta);
  op.kernel = std::move(k);
  op.samples = binary_samples;
  op.cost = std::move(c);
  return op;
}

OpDef& unary(Registry& reg, const std::string& name, Tensor (*fn)(const Tensor&), bool positive, OpCost c) {
  OpDef& op = reg.define(name + "(Tensor self) -> Tensor", "pointwise");
  op.cost = std::move(c);
  const bool keeps_dtype = name == "neg" || name == "abs" || name == "relu";
  op.meta = broadcast_meta(keeps_dtype ? same : floating);
  op.kernel = [fn](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) { return one(fn(in[0])); };
  op.samples = unary_samples;
  if (positive) op.make_input = positive_inputs({0});
  return op;
}

}  // namespace

void define_pointwise_ops(Registry& reg) {
  binary(reg, "add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", broadcast_meta(promoted),
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(kernels::add(in[0], in[1], scalar_arg(c, "alpha")));
         },
         cost(CostClass::kElementwise, Keeps::kNothing)).onnx = {"Add"};
  OpDef& sub = binary(reg, "sub(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", broadcast_meta(promoted),
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(kernels::sub(in[0], in[1], scalar_arg(c, "alpha")));
         },
         cost(CostClass::kElementwise, Keeps::kNothing));
  sub.onnx = {"Sub"};
  // ATen's rsub(self, other) = other - alpha * self has sub's rules on (self, other).
  sub.aten.aliases = {{"rsub.Scalar", "keep:2"}, {"rsub.Tensor", "keep:2"}};
  binary(reg, "mul(Tensor self, Tensor other) -> Tensor", broadcast_meta(promoted),
         [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) { return one(kernels::mul(in[0], in[1])); },
         cost(CostClass::kElementwise)).onnx = {"Mul"};
  // rounding_mode 'trunc'/'floor' keeps the promoted dtype (an int64 quotient stays int64), as torch's.
  OpDef& div = binary(reg, "div(Tensor self, Tensor other, *, str? rounding_mode=None) -> Tensor",
         broadcast_meta([](const OpCall& c) { return c.has("rounding_mode") ? promoted(c) : floating(c); }),
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(kernels::div(in[0], in[1], c.has("rounding_mode") ? c.get_str("rounding_mode") : ""));
         },
         cost(CostClass::kElementwise));
  div.onnx = {"Div"};
  div.aten.aliases = {{"true_divide.Tensor", ""}};  // ATen's alias of div
  reg.mutable_find("div").make_input = positive_inputs({1});
  reg.mutable_find("div").samples = [] {
    std::vector<Sample> s = binary_samples();
    s.push_back(sample({{6, 5}, {6, 5}}, {T(0), T(1)}, {{"rounding_mode", V(std::string("floor"))}}));
    s.push_back(sample({{4, 7, 3}, {7, 1}}, {T(0), T(1)}, {{"rounding_mode", V(std::string("trunc"))}}));
    return s;
  };
  binary(reg, "maximum(Tensor self, Tensor other) -> Tensor", broadcast_meta(promoted),
         [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) { return one(kernels::maximum(in[0], in[1])); },
         cost(CostClass::kElementwise)).onnx = {"Max"};
  binary(reg, "minimum(Tensor self, Tensor other) -> Tensor", broadcast_meta(promoted),
         [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) { return one(kernels::minimum(in[0], in[1])); },
         cost(CostClass::kElementwise)).onnx = {"Min"};
  binary(reg, "pow(Tensor self, Tensor exponent) -> Tensor", broadcast_meta(promoted),
         [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) { return one(kernels::pow(in[0], in[1])); },
         cost(CostClass::kTranscendental)).onnx = {"Pow"};
  reg.mutable_find("pow").make_input = positive_inputs({0});
  {
    OpDef& op = reg.define("pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor", "pointwise");
    op.cost = cost(CostClass::kTranscendental);
    op.meta = broadcast_meta([](const OpCall& c) {
      bool int_exp = std::holds_alternative<int64_t>(c.value("exponent"));
      return int_exp || is_floating(c.tensor(0).dtype) ? c.tensor(0).dtype : DType::kFloat32;
    });
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      const IValue& e = c.value("exponent");
      if (const auto* i = std::get_if<int64_t>(&e)) return one(kernels::pow(in[0], Scalar(*i)));
      return one(kernels::pow(in[0], Scalar(c.get_double("exponent"))));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{5, 6}}, {T(0), I(3)}), sample({{4, 3}}, {T(0), V(0.5)})};
    };
    op.make_input = positive_inputs({0});
  }
  using Cmp = Tensor (*)(const Tensor&, const Tensor&);
  for (auto [name, fn] : {std::pair<const char*, Cmp>{"eq", kernels::eq}, {"ne", kernels::ne},
                          {"lt", kernels::lt}, {"le", kernels::le}, {"gt", kernels::gt}, {"ge", kernels::ge}}) {
    Cmp f = fn;
    OpDef& op = binary(reg, std::string(name) + "(Tensor self, Tensor other) -> Tensor", broadcast_meta(boolean),
           [f](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) { return one(f(in[0], in[1])); },
           cost(CostClass::kElementwise));
    // ATen's cmp.Scalar(x, c): the bridge gives the rules c as a 0-d tensor (it broadcasts).
    op.aten.aliases = {{std::string(name) + ".Scalar", ""}};
  }
  {
    OpDef& op = reg.define("where(Tensor condition, Tensor self, Tensor other) -> Tensor", "pointwise");
    op.cost = cost(CostClass::kElementwise);
    // ATen's where with a scalar branch (clamp's decomposition makes them): the scalar as a 0-d
    // tensor has the same rules.
    op.aten.aliases = {{"where.ScalarSelf", ""}, {"where.ScalarOther", ""}, {"where.Scalar", ""}};
    op.meta = broadcast_meta([](const OpCall& c) {
      DT_CHECK(c.tensor(0).dtype == DType::kBool, "condition must be bool, got ",
               dtype_name(c.tensor(0).dtype));
      return kernels::promote_types(c.tensor(1).dtype, c.tensor(2).dtype);
    });
    op.kernel = [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
      return one(kernels::where(in[0], in[1], in[2]));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{6, 5}, {6, 5}, {6, 5}}, {T(0), T(1), T(2)}, {}, {DType::kBool}),
                                 sample({{5}, {4, 5}, {4, 1}}, {T(0), T(1), T(2)}, {}, {DType::kBool})};
    };
  }
  {
    OpDef& op = reg.define("masked_fill(Tensor self, Tensor mask, Scalar value) -> Tensor", "pointwise");
    op.cost = cost(CostClass::kElementwise);
    // Out of place, self and mask broadcast together (ATen's masked_fill; in-place masked_fill_
    // alone needs the mask to fit self).
    op.meta = [](const OpCall& c) {
      return guard(c, [&] {
        DT_CHECK(c.tensor(1).dtype == DType::kBool, "mask must be bool, got ", dtype_name(c.tensor(1).dtype));
        Shape b = kernels::broadcast_shapes(c.tensor(0).shape, c.tensor(1).shape);
        return std::vector<TensorMeta>{{b, c.tensor(0).dtype}};
      });
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      const Shape b = kernels::broadcast_shapes(in[0].sizes(), in[1].sizes());
      const Tensor x = b == in[0].sizes() ? in[0] : in[0].expand(b);
      return one(kernels::masked_fill(x, in[1], scalar_arg(c, "value")));
    };
    op.samples = [] {
      return std::vector<Sample>{
          sample({{6, 5}, {6, 5}}, {T(0), T(1), V(-1.5)}, {}, {DType::kFloat32, DType::kBool}),
          sample({{4, 6}, {6}}, {T(0), T(1), V(0.0)}, {}, {DType::kFloat32, DType::kBool}),
          sample({{6}, {5, 6}}, {T(0), T(1), V(2.0)}, {}, {DType::kFloat32, DType::kBool})};
    };
  }
  // Tensor-scalar arithmetic: the scalar keeps torch's promotion (a float scalar on an int tensor
  // gives float32).
  for (const char* name : {"add.Scalar", "mul.Scalar", "div.Scalar"}) {
    std::string n = name;
    std::string schema = n + (n == "add.Scalar" ? "(Tensor self, Scalar other, Scalar alpha=1) -> Tensor"
                      : n == "div.Scalar" ? "(Tensor self, Scalar other, *, str? rounding_mode=None) -> Tensor"
                                          : "(Tensor self, Scalar other) -> Tensor");
    OpDef& op = reg.define(schema, "pointwise");
    op.cost = cost(CostClass::kElementwise, Keeps::kNothing);
    op.meta = [n](const OpCall& c) {
      DType d = c.tensor(0).dtype;
      bool float_scalar = std::holds_alternative<double>(c.value("other"));
      const bool rounding = n == "div.Scalar" && c.has("rounding_mode");
      if (!is_floating(d) && !is_complex(d) && (float_scalar || (n == "div.Scalar" && !rounding))) d = DType::kFloat32;
      return std::vector<TensorMeta>{{c.tensor(0).shape, d}};
    };
    op.kernel = [n](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      const IValue& v = c.value("other");
      Scalar s = std::holds_alternative<int64_t>(v) ? Scalar(std::get<int64_t>(v)) : Scalar(c.get_double("other"));
      if (n == "add.Scalar") return one(kernels::add(in[0], s, scalar_arg(c, "alpha")));
      if (n == "mul.Scalar") return one(kernels::mul(in[0], s));
      return one(kernels::div(in[0], s, c.has("rounding_mode") ? c.get_str("rounding_mode") : ""));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{6, 5}}, {T(0), V(-1.5)}), sample({{4, 7}}, {T(0), V(2.0)})};
    };
    op.complex = true;  // complex self: kernels/cpu/complex.h (the Scalar is real)
  }
  unary(reg, "neg", kernels::neg, false, cost(CostClass::kElementwise, Keeps::kNothing)).onnx = {"Neg"};
  // Complex operands: kernels/cpu/complex.h (the kernels route there themselves). Samples with
  // complex operands (both, and complex with real) so that the validator and gradcheck see them.
  for (const char* name : {"add", "sub", "mul", "div", "neg"}) {
    OpDef& op = reg.mutable_find(name);
    op.complex = true;
    const bool unary_op = std::string(name) == "neg";
    op.samples = [base = op.samples, unary_op] {
      std::vector<Sample> s = base();
      if (unary_op) {
        s.push_back(sample({{4, 3}}, {T(0)}, {}, {DType::kComplex64}));
      } else {
        s.push_back(sample({{4, 3}, {4, 3}}, {T(0), T(1)}, {}, {DType::kComplex64, DType::kComplex64}));
        s.push_back(sample({{4, 3}, {3}}, {T(0), T(1)}, {}, {DType::kComplex128, DType::kFloat64}));
      }
      return s;
    };
  }
  unary(reg, "abs", kernels::abs, false, cost(CostClass::kElementwise)).onnx = {"Abs"};
  unary(reg, "relu", kernels::relu, false, cost(CostClass::kElementwise, Keeps::kOutput)).onnx = {"Relu"};
  unary(reg, "exp", kernels::exp, false, cost(CostClass::kTranscendental, Keeps::kOutput)).onnx = {"Exp"};
  unary(reg, "log", kernels::log, true, cost(CostClass::kTranscendental)).onnx = {"Log"};
  unary(reg, "sqrt", kernels::sqrt, true, cost(CostClass::kTranscendental)).onnx = {"Sqrt"};
  unary(reg, "rsqrt", kernels::rsqrt, true, cost(CostClass::kTranscendental));
  unary(reg, "tanh", kernels::tanh, false, cost(CostClass::kTranscendental, Keeps::kOutput)).onnx = {"Tanh"};
  unary(reg, "sigmoid", kernels::sigmoid, false, cost(CostClass::kTranscendental, Keeps::kOutput)).onnx = {"Sigmoid"};
  unary(reg, "silu", kernels::silu, false, cost(CostClass::kTranscendental));
  // Complex x: kernels/cpu/complex.h (torch's formulas in complex arithmetic); the backward takes
  // the conjugate of the derivative (ops/pointwise/backward.cc).
  for (const char* name : {"sigmoid", "silu"}) {
    OpDef& op = reg.mutable_find(name);
    op.complex = true;
    op.samples = [base = op.samples] {
      std::vector<Sample> s = base();
      s.push_back(sample({{4, 3}}, {T(0)}, {}, {DType::kComplex64}));
      return s;
    };
  }
  {
    OpDef& op = reg.define("gelu(Tensor self, *, str approximate='none') -> Tensor", "pointwise");
    op.cost = cost(CostClass::kTranscendental);
    op.meta = broadcast_meta(floating);
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return one(kernels::gelu(in[0], c.get_str("approximate")));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{6, 5}}, {T(0)}),
                                 sample({{3, 4}}, {T(0)}, {{"approximate", V(std::string("tanh"))}})};
    };
  }
  {
    OpDef& op = reg.define("to(Tensor self, ScalarType dtype) -> Tensor", "pointwise");
    op.cost = cost(CostClass::kElementwise, Keeps::kNothing);
    op.complex = true;  // Tensor::to (copy_strided): complex from real with imaginary part 0, to real keeps the real part
    // ATen's dtype conversions: _to_copy(x, *, dtype, ...) takes the dtype alone (a device or
    // layout change has no rule); to.dtype(self, dtype, non_blocking, copy, memory_format).
    op.aten.aliases = {{"_to_copy", "to_copy"}, {"to.dtype", "keep:2"}, {"to.dtype_layout", "to_copy"}};
    op.meta = [](const OpCall& c) {
      return guard(c, [&] {
        return std::vector<TensorMeta>{{c.tensor(0).shape, dtype_from_name(c.get_str("dtype"))}};
      });
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return one(in[0].to(dtype_from_name(c.get_str("dtype"))).contiguous());
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{6, 5}}, {T(0), V(std::string("float64"))}),
                                 sample({{6, 5}}, {T(0), V(std::string("int64"))}),
                                 sample({{4, 3}}, {T(0), V(std::string("bfloat16"))})};
    };
  }
}

DTENSOR_FAMILY_PART("pointwise", kDefinitions, define_pointwise_ops);

}  // namespace dtensor::ops
