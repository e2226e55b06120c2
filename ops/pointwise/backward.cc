// Backward formulas of the pointwise ops (torch's derivatives.yaml conventions: gradients of
// broadcast inputs are summed back to their shapes; maximum/minimum split ties evenly).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

// A complex gradient reaching a real input keeps its real part (torch's handle_r_to_c).
DTensor real_like(const DTensor& g, const DTensor& input) {
  return is_complex(g.dtype()) && !is_complex(input.dtype()) ? call_op1("real", {g}) : g;
}

Grads binary(const BackwardCtx& c, const std::function<std::pair<DTensor, DTensor>(const DTensor&)>& f) {
  auto [ga, gb] = f(c.grad(0));
  return {real_like(sum_to(ga, c.inputs[0].shape()), c.inputs[0]),
          real_like(sum_to(gb, c.inputs[1].shape()), c.inputs[1])};
}

// x, conjugated when complex: the derivative formulas of mul and div take the conjugate of the other
// operand (torch's derivatives.yaml: grad * other.conj(), grad / other.conj(), ...).
DTensor conj(const DTensor& x) { return is_complex(x.dtype()) ? call_op1("conj_physical", {x}) : x; }

}  // namespace

void register_pointwise_backward(Registry&) {
  def("add", [](const BackwardCtx& c) {
    double alpha = c.call.get_double("alpha");
    return binary(c, [&](const DTensor& g) { return std::pair{g, alpha == 1.0 ? g : F::mul(g, alpha)}; });
  });
  def("sub", [](const BackwardCtx& c) {
    double alpha = c.call.get_double("alpha");
    return binary(c, [&](const DTensor& g) { return std::pair{g, F::mul(g, -alpha)}; });
  });
  def("mul", [](const BackwardCtx& c) {
    return binary(c, [&](const DTensor& g) {
      return std::pair{F::mul(g, conj(c.inputs[1])), F::mul(g, conj(c.inputs[0]))};
    });
  });
  def("div", [](const BackwardCtx& c) {
    const DTensor &a = c.inputs[0], &b = c.inputs[1];
    // A rounded quotient is piecewise constant: zero gradients, as torch's derivatives.yaml.
    if (c.call.has("rounding_mode"))
      return binary(c, [&](const DTensor& g) { return std::pair{F::mul(g, 0.0), F::mul(g, 0.0)}; });
    return binary(c, [&](const DTensor& g) {
      return std::pair{F::div(g, conj(b)), F::neg(F::div(F::mul(g, conj(a)), conj(F::mul(b, b))))};
    });
  });
  for (auto [name, greater] : {std::pair{"maximum", true}, {"minimum", false}}) {
    bool gt = greater;
    def(name, [gt](const BackwardCtx& c) {
      const DTensor &a = c.inputs[0], &b = c.inputs[1];
      DTensor win = as_float(call_op1(gt ? "gt" : "lt", {a, b}), c.outputs[0].dtype());
      DTensor tie = as_float(call_op1("eq", {a, b}), c.outputs[0].dtype());
      DTensor wa = F::add(win, F::mul(tie, 0.5));  // ties: half to each side
      return binary(c, [&](const DTensor& g) {
        DTensor ga = F::mul(g, wa);
        return std::pair{ga, F::sub(g, ga)};
      });
    });
  }
  def("pow", [](const BackwardCtx& c) {
    const DTensor &a = c.inputs[0], &b = c.inputs[1];
    return binary(c, [&](const DTensor& g) {
      DTensor ga = F::mul(g, F::mul(b, call_op1("pow", {a, F::add(b, -1.0)})));
      DTensor gb = F::mul(g, F::mul(c.outputs[0], F::log(a)));
      return std::pair{ga, gb};
    });
  });
  def("pow.Tensor_Scalar", [](const BackwardCtx& c) {
    double e = c.call.get_double("exponent");
    return Grads{F::mul(F::mul(c.grad(0), F::pow(c.inputs[0], e - 1.0)), e)};
  });
  def("where", [](const BackwardCtx& c) {
    const DTensor& cond = c.inputs[0];
    DTensor g = c.grad(0);
    DTensor zero = F::mul(g, 0.0);
    return Grads{std::nullopt, sum_to(F::where(cond, g, zero), c.inputs[1].shape()),
                 sum_to(F::where(cond, zero, g), c.inputs[2].shape())};
  });
  def("masked_fill", [](const BackwardCtx& c) {
    // self may have been broadcast to the mask's shape: its gradient is summed back.
    return Grads{sum_to(F::masked_fill(c.grad(0), c.inputs[1], 0.0), c.inputs[0].shape()), std::nullopt};
  });
  def("add.Scalar", [](const BackwardCtx& c) { return Grads{c.grad(0)}; });
  def("mul.Scalar", [](const BackwardCtx& c) { return Grads{F::mul(c.grad(0), c.call.get_double("other"))}; });
  def("div.Scalar", [](const BackwardCtx& c) {
    if (c.call.has("rounding_mode")) return Grads{F::mul(c.grad(0), 0.0)};  // piecewise constant
    return Grads{F::div(c.grad(0), c.call.get_double("other"))};
  });
  def("neg", [](const BackwardCtx& c) { return Grads{F::neg(c.grad(0))}; });
  def("abs", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    DTensor zero = full_like(x, 0.0);
    DTensor sign = F::sub(as_float(call_op1("gt", {x, zero}), x.dtype()), as_float(call_op1("lt", {x, zero}), x.dtype()));
    return Grads{F::mul(c.grad(0), sign)};
  });
  def("exp", [](const BackwardCtx& c) { return Grads{F::mul(c.grad(0), c.outputs[0])}; });
  def("log", [](const BackwardCtx& c) { return Grads{F::div(c.grad(0), c.inputs[0])}; });
  def("sqrt", [](const BackwardCtx& c) { return Grads{F::div(c.grad(0), F::mul(c.outputs[0], 2.0))}; });
  def("rsqrt", [](const BackwardCtx& c) {
    const DTensor& o = c.outputs[0];
    return Grads{F::mul(F::mul(c.grad(0), F::mul(o, F::mul(o, o))), -0.5)};
  });
  def("tanh", [](const BackwardCtx& c) {
    const DTensor& o = c.outputs[0];
    return Grads{F::mul(c.grad(0), F::add(F::neg(F::mul(o, o)), 1.0))};
  });
  def("sigmoid", [](const BackwardCtx& c) {
    const DTensor& o = c.outputs[0];
    return Grads{F::mul(c.grad(0), conj(F::mul(o, F::add(F::neg(o), 1.0))))};
  });
  def("relu", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    return Grads{F::mul(c.grad(0), as_float(call_op1("gt", {x, full_like(x, 0.0)}), x.dtype()))};
  });
  def("silu", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    DTensor s = F::sigmoid(x);
    DTensor d = F::mul(s, F::add(F::mul(x, F::add(F::neg(s), 1.0)), 1.0));  // s (1 + x (1 - s))
    return Grads{F::mul(c.grad(0), conj(d))};  // complex: grad * conj(f'(x)), derivatives.yaml's rule
  });
  def("gelu", [](const BackwardCtx& c) {
    return Grads{call_op1("gelu_backward", {c.grad(0), c.inputs[0]},
                          {{"approximate", iv(c.call.get_str("approximate"))}})};
  });
  def("to", [](const BackwardCtx& c) { return Grads{c.grad(0)}; });  // cast back by the node
  for (const char* name : {"eq", "ne", "lt", "le", "gt", "ge"})
    def(name, [](const BackwardCtx& c) { return Grads(c.inputs.size()); });
}

DTENSOR_FAMILY_PART("pointwise", kBackward, register_pointwise_backward);

}  // namespace dtensor::bw
