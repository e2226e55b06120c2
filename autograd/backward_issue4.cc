// Backward formulas of scans, value-selecting reductions and pooling (through the *_backward ops,
// which carry their own sharding rules).
#include "autograd/backward_util.h"

namespace dtensor::bw {
namespace {

IValue list_arg(const OpCall& c, const char* name) { return c.value(name); }

}  // namespace

void register_issue4_backward() {
  // cumsum: the suffix sum of the gradient = total - inclusive prefix + g (all shard-aware ops).
  def("cumsum", [](const BackwardCtx& c) {
    int64_t d = c.call.get_int("dim");
    DTensor g = c.grad(0);
    DTensor total = F::expand(F::sum(g, {d}, true), {g.shape().begin(), g.shape().end()});
    return Grads{F::add(F::sub(total, call_op1("cumsum", {g, iv(d)})), g)};
  });
  def("cumprod", [](const BackwardCtx& c) {
    return Grads{call_op1("cumprod_backward", {c.grad(0), c.inputs[0], iv(c.call.get_int("dim")), c.outputs[0]})};
  });
  def("logcumsumexp", [](const BackwardCtx& c) {
    return Grads{call_op1("logcumsumexp_backward", {c.grad(0), c.inputs[0], c.outputs[0], iv(c.call.get_int("dim"))})};
  });
  for (const char* name : {"cummax", "cummin"})
    def(name, [](const BackwardCtx& c) {
      return Grads{call_op1("cummaxmin_backward", {c.grad(0), c.inputs[0], c.outputs[1], iv(c.call.get_int("dim"))})};
    });
  for (const char* name : {"max.dim", "min.dim", "median.dim", "nanmedian.dim", "kthvalue"})
    def(name, [](const BackwardCtx& c) {
      const DTensor& x = c.inputs[0];
      return Grads{call_op1("value_selecting_reduction_backward",
                            {c.grad(0), iv(c.call.get_int("dim")), c.outputs[1],
                             iv(std::vector<int64_t>(x.shape().begin(), x.shape().end())), iv(c.call.get_bool("keepdim"))})};
    });
  // Whole-tensor median: the gradient is split evenly among the elements equal to the result (among
  // the NaNs when the result is NaN).
  for (const char* name : {"median", "nanmedian"})
    def(name, [](const BackwardCtx& c) {
      const DTensor& x = c.inputs[0];
      std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
      DTensor out = F::expand(F::reshape(c.outputs[0], std::vector<int64_t>(shape.size(), 1)), shape);
      DTensor out_nan = call_op1("ne", {out, out});
      DTensor mask = F::where(out_nan, call_op1("ne", {x, x}), call_op1("eq", {x, out}));
      DTensor m = as_float(mask, x.dtype());
      DTensor g = F::expand(F::reshape(c.grad(0), std::vector<int64_t>(shape.size(), 1)), shape);
      return Grads{F::div(F::mul(g, m), F::expand(F::sum(m, {}, true), shape))};
    });
  for (int dims : {1, 2, 3}) {
    std::string d = std::to_string(dims);
    def("avg_pool" + d + "d", [d](const BackwardCtx& c) {
      const OpCall& k = c.call;
      return Grads{call_op1("avg_pool" + d + "d_backward",
                            {c.grad(0), c.inputs[0], list_arg(k, "kernel_size"), list_arg(k, "stride"),
                             list_arg(k, "padding"), k.value("ceil_mode"), k.value("count_include_pad"),
                             k.value("divisor_override")})};
    });
    def("max_pool" + d + "d_with_indices", [d](const BackwardCtx& c) {
      const OpCall& k = c.call;
      return Grads{call_op1("max_pool" + d + "d_with_indices_backward",
                            {c.grad(0), c.inputs[0], list_arg(k, "kernel_size"), list_arg(k, "stride"),
                             list_arg(k, "padding"), list_arg(k, "dilation"), k.value("ceil_mode"), c.outputs[1]})};
    });
  }
  def("adaptive_avg_pool2d", [](const BackwardCtx& c) {
    return Grads{call_op1("adaptive_avg_pool2d_backward", {c.grad(0), c.inputs[0]})};
  });
  for (const char* name : {"argmax", "argmin"}) def(name, [](const BackwardCtx& c) { return Grads(c.inputs.size()); });
}

}  // namespace dtensor::bw
