// Backward formulas of the view and shape ops: the inverse rearrangement of the gradient.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

std::vector<int64_t> shape_of(const DTensor& x) { return {x.shape().begin(), x.shape().end()}; }

}  // namespace

void register_view_backward(Registry&) {
  for (const char* name : {"view", "reshape", "flatten", "squeeze", "unsqueeze"})
    def(name, [](const BackwardCtx& c) { return Grads{F::reshape(c.grad(0), shape_of(c.inputs[0]))}; });
  def("transpose", [](const BackwardCtx& c) {
    return Grads{F::transpose(c.grad(0), c.call.get_int("dim0"), c.call.get_int("dim1"))};
  });
  def("t", [](const BackwardCtx& c) { return Grads{call_op1("t", {c.grad(0)})}; });
  def("permute", [](const BackwardCtx& c) {
    auto dims = c.call.get_int_list("dims");
    const int64_t r = static_cast<int64_t>(dims.size());
    std::vector<int64_t> inv(r);
    for (int64_t k = 0; k < r; ++k) inv[wrap_dim(dims[k], r, "dims")] = k;
    return Grads{F::permute(c.grad(0), inv)};
  });
  def("expand", [](const BackwardCtx& c) { return Grads{sum_to(c.grad(0), c.inputs[0].shape())}; });
  def("cat", [](const BackwardCtx& c) {
    const int64_t d = wrap_dim(c.call.get_int("dim"), c.inputs[0].dim(), "dim");
    DTensor g = c.grad(0);
    Grads r;
    int64_t at = 0;
    for (const DTensor& x : c.inputs) {
      int64_t len = x.shape()[d];
      r.push_back(call_op1("slice", {g, iv(d), iv(at), iv(at + len), iv(int64_t{1})}));
      at += len;
    }
    return r;
  });
  def("stack", [](const BackwardCtx& c) {
    const int64_t d = wrap_dim(c.call.get_int("dim"), c.inputs[0].dim() + 1, "dim");
    Grads r;
    for (size_t i = 0; i < c.inputs.size(); ++i)
      r.push_back(call_op1("select", {c.grad(0), iv(d), iv(static_cast<int64_t>(i))}));
    return r;
  });
  for (const char* name : {"split", "split_with_sizes"})
    def(name, [](const BackwardCtx& c) {
      const int64_t d = wrap_dim(c.call.get_int("dim"), c.inputs[0].dim(), "dim");
      std::vector<DTensor> parts;
      for (size_t i = 0; i < c.outputs.size(); ++i) parts.push_back(c.grad(static_cast<int>(i)));
      return Grads{call_op1("cat", {parts, iv(d)})};
    });
  def("diagonal", [](const BackwardCtx& c) {
    const Shape& s = c.inputs[0].shape();
    return Grads{call_op1("diagonal_backward", {c.grad(0), iv(std::vector<int64_t>(s.begin(), s.end())),
                                                iv(c.call.get_int("offset")), iv(c.call.get_int("dim1")),
                                                iv(c.call.get_int("dim2"))})};
  });
  def("slice", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    const int64_t d = wrap_dim(c.call.get_int("dim"), x.dim(), "dim"), n = x.shape()[d];
    int64_t start = c.call.get_opt_int("start").value_or(0), end = c.call.get_opt_int("end").value_or(n);
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = std::clamp<int64_t>(start, 0, n);
    end = std::clamp<int64_t>(end, start, n);
    return Grads{call_op1("slice_backward", {c.grad(0), iv(shape_of(x)), iv(d), iv(start), iv(end),
                                             iv(c.call.get_int("step"))})};
  });
  def("select", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    return Grads{call_op1("select_backward", {c.grad(0), iv(shape_of(x)), iv(c.call.get_int("dim")),
                                              iv(c.call.get_int("index"))})};
  });
}

DTENSOR_FAMILY_PART("view", kBackward, register_view_backward);

}  // namespace dtensor::bw
