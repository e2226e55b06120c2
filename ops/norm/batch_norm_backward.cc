// Backward of _native_batch_norm_legit_functional (batch_norm_defs.cc), composed of registered ops
// so its sharding follows from theirs. With xhat = (x - mean) * invstd over n elements per channel:
// training: grad_input = invstd * (gy - mean(gy) - xhat * mean(gy * xhat)) with gy = grad * weight
// (ATen's native_batch_norm_backward), plus the paths through save_mean (1 / n), save_invstd
// (-invstd^3 (x - mean) / n), running_mean_out (momentum / n) and running_var_out (momentum * 2 (x -
// mean) / (n - 1)), which ATen leaves out (its autograd treats them as not differentiable);
// evaluation: grad_input = gy * invstd, and the running statistics get the gradients of out (and of
// their own outputs, which equal them). grad_weight = sum(grad * xhat), grad_bias = sum(grad).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

void register_batch_norm_backward(Registry&) {
  def("_native_batch_norm_legit_functional", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    const Shape& s = x.shape();
    const int64_t rank = static_cast<int64_t>(s.size()), ch = s[1];
    std::vector<int64_t> dims{0}, cs(static_cast<size_t>(rank), 1);
    for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
    cs[1] = ch;
    const double n = ch == 0 ? 0.0 : static_cast<double>(numel(s) / ch);
    const double momentum = c.call.get_double("momentum");
    const int wi = c.call.tensor_index("weight"), bi = c.call.tensor_index("bias");
    const int mi = c.call.tensor_index("running_mean"), vi = c.call.tensor_index("running_var");
    const bool training = c.call.get_bool("training");
    const DTensor g = c.grad(0);
    const DTensor mean = training ? F::reshape(c.outputs[1], cs) : F::reshape(c.inputs[mi], cs);
    const DTensor invstd = training ? F::reshape(c.outputs[2], cs)
                                    : F::rsqrt(F::add(F::reshape(c.inputs[vi], cs), c.call.get_double("eps")));
    const DTensor xc = F::sub(x, mean), xhat = F::mul(xc, invstd);
    const DTensor gy = wi >= 0 ? F::mul(g, F::reshape(c.inputs[wi], cs)) : g;
    auto channel = [&](int out) { return F::reshape(c.grad(out), cs); };
    Grads r(c.inputs.size());
    if (c.needs[0]) {
      if (!training) {
        r[0] = F::mul(gy, invstd);
      } else {
        DTensor gin = F::mul(F::sub(F::sub(gy, F::mean(gy, dims, true)),
                                    F::mul(xhat, F::mean(F::mul(gy, xhat), dims, true))),
                             invstd);
        if (c.grads[1]) gin = F::add(gin, F::div(channel(1), n));
        if (c.grads[2]) gin = F::sub(gin, F::div(F::mul(F::mul(channel(2), F::pow(invstd, 3.0)), xc), n));
        if (c.grads[3]) gin = F::add(gin, F::mul(channel(3), momentum / n));
        if (c.grads[4]) gin = F::add(gin, F::mul(F::mul(channel(4), xc), 2 * momentum / (n - 1)));
        r[0] = gin;
      }
    }
    if (wi >= 0 && c.needs[wi]) r[wi] = F::sum(F::mul(g, xhat), dims, false);
    if (bi >= 0 && c.needs[bi]) r[bi] = F::sum(g, dims, false);
    // The running statistics: through out in evaluation, through their own outputs always.
    const double keep = training ? 1 - momentum : 1.0;
    if (c.needs[mi])
      r[mi] = training ? F::mul(c.grad(3), keep) : F::add(F::sum(F::mul(gy, F::neg(invstd)), dims, false), c.grad(3));
    if (c.needs[vi]) {
      r[vi] = training ? F::mul(c.grad(4), keep)
                       : F::add(F::sum(F::mul(F::mul(gy, xc), F::mul(F::pow(invstd, 3.0), -0.5)), dims, false),
                                c.grad(4));
    }
    return r;
  });
}

}  // namespace

DTENSOR_FAMILY_PART("norm", kBackward, register_batch_norm_backward);

}  // namespace dtensor::bw
