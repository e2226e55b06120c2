// d index_select(self, dim, index) / d self = index_select_backward(grad, self.shape, dim, index):
// the gradient rows scatter-added back to the indices they came from; index has none.
// index_add(self, dim, index, source, alpha): self's gradient is grad, source's is
// alpha * index_select(grad, dim, index). gather, scatter_add and scatter below.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

// torch's formula for src's gradient (derivatives.yaml: grad.gather(dim, index)) has index's shape.
void check_src_like_index(const BackwardCtx& c, const char* op) {
  const Shape& src = c.inputs[2].shape();
  const Shape& index = c.inputs[1].shape();
  DT_CHECK(index == src, op, " backward: src ", shape_str(src), " is larger than index ", shape_str(index),
           "; accepted for src's gradient: src and index of the same shape (as torch)");
}

// grad with the elements the scatter wrote (at c's index along c's dim) zeroed.
DTensor zeroed_where_written(const BackwardCtx& c) {
  return call_op1("scatter.value", {c.grad(0), iv(c.call.get_int("dim")), c.inputs[1], iv(0.0)});
}

void register_indexing_backward(Registry&) {
  def("index_select", [](const BackwardCtx& c) {
    const Shape& s = c.inputs[0].shape();
    return Grads{call_op1("index_select_backward",
                          {c.grad(0), iv(std::vector<int64_t>(s.begin(), s.end())), iv(c.call.get_int("dim")),
                           c.inputs[1]}),
                 std::nullopt};
  });
  // gather: self's gradient is grad scatter-added into zeros at the indices; scatter_add: self's
  // is grad, src's is grad gathered at the indices.
  def("gather", [](const BackwardCtx& c) {
    const DTensor zeros = full_like(c.inputs[0], 0.0);
    return Grads{call_op1("scatter_add", {zeros, iv(c.call.get_int("dim")), c.inputs[1], c.grad(0)}), std::nullopt};
  });
  def("scatter_add", [](const BackwardCtx& c) {
    check_src_like_index(c, "scatter_add");
    return Grads{c.grad(0), std::nullopt, call_op1("gather", {c.grad(0), iv(c.call.get_int("dim")), c.inputs[1]})};
  });
  // scatter: self's gradient is grad with the written elements zeroed, src's is grad gathered at
  // the indices (torch's derivatives.yaml, overwritten duplicates included).
  def("scatter.src", [](const BackwardCtx& c) {
    check_src_like_index(c, "scatter");
    return Grads{zeroed_where_written(c), std::nullopt,
                 call_op1("gather", {c.grad(0), iv(c.call.get_int("dim")), c.inputs[1]})};
  });
  def("scatter.value", [](const BackwardCtx& c) { return Grads{zeroed_where_written(c), std::nullopt}; });
  // scatter_reduce (sum, mean; torch's derivatives.yaml): with include_self, self's gradient is grad
  // (mean: over each element's count), else grad zeroed where src lands; src's is grad (mean: over
  // the count) gathered at the indices. amax, amin and prod have no backward here.
  def("scatter_reduce.two", [](const BackwardCtx& c) {
    const std::string r = c.call.get_str("reduce");
    DT_CHECK(r == "sum" || r == "mean", "scatter_reduce backward: reduce '", r,
             "' has no backward in dtensor yet; accepted: sum, mean");
    check_src_like_index(c, "scatter_reduce");
    const bool inc = c.call.get_bool("include_self");
    const IValue dim = iv(c.call.get_int("dim"));
    DTensor g = c.grad(0);
    if (r == "mean") {  // the count of each element: self's own (include_self) and what lands on it
      const DTensor n = call_op1("scatter_add", {full_like(c.inputs[0], inc ? 1.0 : 0.0), dim, c.inputs[1],
                                                 full_like(c.inputs[2], 1.0)});
      g = F::div(g, F::maximum(n, full_like(n, 1.0)));
    }
    const DTensor self_grad = inc ? g : zeroed_where_written(c);
    return Grads{self_grad, std::nullopt, call_op1("gather", {g, dim, c.inputs[1]})};
  });
  def("index_add", [](const BackwardCtx& c) {
    const double alpha = c.call.get_double("alpha");
    DTensor g = call_op1("index_select", {c.grad(0), iv(c.call.get_int("dim")), c.inputs[1]});
    return Grads{c.grad(0), std::nullopt, alpha == 1 ? g : F::mul(g, alpha)};
  });
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kBackward, register_indexing_backward);

}  // namespace dtensor::bw
