// Backward formulas of the spectral ops, as torch 2.15's derivatives.yaml gives them
// (torchgen/packaged/autograd/derivatives.yaml): _fft_r2c -> fft_r2c_backward(grad, dim,
// normalization, onesided, self.size(dim.back())), _fft_c2r -> fft_c2r_backward(grad, dim,
// normalization), _fft_c2c -> _fft_c2c(grad, dim, normalization, !forward). The first two are the
// backward ops of ops/spectral/defs.cc.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_spectral_backward(Registry&) {
  def("_fft_r2c", [](const BackwardCtx& c) {
    std::vector<int64_t> dims = c.call.get_int_list("dim");
    const int64_t rank = c.inputs[0].dim();
    const int64_t last = dims.back() < 0 ? dims.back() + rank : dims.back();
    return Grads{call_op1("_fft_r2c_backward", {c.grad(0), iv(dims), iv(c.call.get_int("normalization")),
                                                iv(c.call.get_bool("onesided")), iv(c.inputs[0].shape()[last])})};
  });
  def("_fft_c2r", [](const BackwardCtx& c) {
    return Grads{call_op1("_fft_c2r_backward",
                          {c.grad(0), iv(c.call.get_int_list("dim")), iv(c.call.get_int("normalization"))})};
  });
  def("_fft_c2c", [](const BackwardCtx& c) {
    return Grads{call_op1("_fft_c2c", {c.grad(0), iv(c.call.get_int_list("dim")), iv(c.call.get_int("normalization")),
                                       iv(!c.call.get_bool("forward"))})};
  });
}

DTENSOR_FAMILY_PART("spectral", kBackward, register_spectral_backward);

}  // namespace dtensor::bw
