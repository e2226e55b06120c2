// Backward of the copies (ops/view/copy_defs.cc): clone and alias pass the gradient, flip flips it
// back, repeat sums its tiles, constant_pad_nd crops the padding (a pad of the negated amounts),
// and the outputs of fill and full_like do not depend on their input (a zero gradient, as torch's);
// copy passes the gradient to src, summed over its broadcast dims.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_copy_backward(Registry&) {
  for (const char* name : {"clone", "alias"}) def(name, [](const BackwardCtx& c) { return Grads{c.grad(0)}; });
  def("flip", [](const BackwardCtx& c) {
    return Grads{call_op1("flip", {c.grad(0), iv(c.call.get_int_list("dims"))})};
  });
  def("repeat", [](const BackwardCtx& c) {
    // g [r0 * s0, r1 * s1, ...] viewed as [r0, s0, r1, s1, ...]: the sum over the r dims.
    const std::vector<int64_t> reps = c.call.get_int_list("repeats");
    const DTensor& x = c.inputs[0];
    const size_t lead = reps.size() - static_cast<size_t>(x.dim());
    std::vector<int64_t> interleaved, tiles;
    for (size_t i = 0; i < reps.size(); ++i) {
      interleaved.push_back(reps[i]);
      interleaved.push_back(i < lead ? 1 : x.shape()[i - lead]);
      tiles.push_back(static_cast<int64_t>(2 * i));
    }
    const DTensor summed = F::sum(F::reshape(c.grad(0), interleaved), tiles, false);
    return Grads{F::reshape(summed, {x.shape().begin(), x.shape().end()})};
  });
  def("constant_pad_nd", [](const BackwardCtx& c) {
    std::vector<int64_t> crop = c.call.get_int_list("pad");
    for (int64_t& p : crop) p = -p;
    return Grads{call_op1("constant_pad_nd", {c.grad(0), iv(crop), iv(0.0)})};
  });
  // select_scatter / slice_scatter: self's gradient is grad with the region zeroed; src's is grad's
  // region.
  def("select_scatter", [](const BackwardCtx& c) {
    const OpArg dim = iv(c.call.get_int("dim")), index = iv(c.call.get_int("index"));
    return Grads{call_op1("select_scatter", {c.grad(0), full_like(c.inputs[1], 0.0), dim, index}),
                 call_op1("select", {c.grad(0), dim, index})};
  });
  def("slice_scatter", [](const BackwardCtx& c) {
    const OpArg dim = iv(c.call.get_int("dim")), step = iv(c.call.get_int("step"));
    auto opt = [&](const char* a) { return c.call.has(a) ? iv(c.call.get_int(a)) : IValue(); };
    return Grads{call_op1("slice_scatter",
                          {c.grad(0), full_like(c.inputs[1], 0.0), dim, opt("start"), opt("end"), step}),
                 call_op1("slice", {c.grad(0), dim, opt("start"), opt("end"), step})};
  });
  def("fill.Scalar", [](const BackwardCtx& c) { return Grads{full_like(c.inputs[0], 0.0)}; });
  def("full_like", [](const BackwardCtx& c) { return Grads{full_like(c.inputs[0], 0.0)}; });
  // copy: self's values are unused; src's gradient is grad summed back over the broadcast dims, in
  // src's dtype.
  def("copy", [](const BackwardCtx& c) {
    const DTensor g = sum_to(c.grad(0), c.inputs[1].shape());
    return Grads{full_like(c.inputs[0], 0.0), g.dtype() == c.inputs[1].dtype() ? g : F::to(g, c.inputs[1].dtype())};
  });
}

DTENSOR_FAMILY_PART("view", kBackward, register_copy_backward);

}  // namespace dtensor::bw
