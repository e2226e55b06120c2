// Kernels of complex64/complex128 tensors (std::complex<float> / <double>, real part first) with
// torch's semantics: element-wise arithmetic (add, sub, mul, div and neg route here from
// kernels/cpu/pointwise.h when an operand is complex), conjugation, the real and imaginary parts,
// and the views between a complex tensor and its [..., 2] real pairs. Host only
// (DT_KERNEL_HOST_ONLY: device tensors go through host copies, counted as a host fallback).
#pragma once

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// a + alpha * b (sub: alpha negated), a * b, a / b, broadcast as torch does; the result has
// torch's promoted dtype, complex (a real operand converts with imaginary part 0). alpha is real.
Tensor complex_add(const Tensor& a, const Tensor& b, double alpha);
Tensor complex_mul(const Tensor& a, const Tensor& b);
Tensor complex_div(const Tensor& a, const Tensor& b);
Tensor complex_neg(const Tensor& x);
// torch.sigmoid and silu of complex x: 1 / (1 + exp(-x)) and x / (1 + exp(-x)) in complex
// arithmetic (torch's CPU kernels' formulas); same dtype out. Infinite and NaN where 1 + exp(-x) is 0.
Tensor complex_sigmoid(const Tensor& x);
Tensor complex_silu(const Tensor& x);

// The complex conjugate as a new tensor (torch's conj_physical; a real tensor is copied).
Tensor conj_physical(const Tensor& x);

// The real pairs of complex x as a view: shape [..., 2], float32 for complex64 and float64 for
// complex128 (torch.view_as_real). Throws naming the dtype for a real x.
Tensor view_as_real(const Tensor& x);
// The inverse view: x float32/float64 with last dim 2 of stride 1, other strides even and an even
// storage offset (torch.view_as_complex's conditions); throws naming what fails.
Tensor view_as_complex(const Tensor& x);
// The real and imaginary parts of complex x as views (torch.real / torch.imag); real of a real
// tensor is itself, imag of one throws.
Tensor real_part(const Tensor& x);
Tensor imag_part(const Tensor& x);
// torch.complex(real, imag): both float32 or both float64 (broadcast); complex64 / complex128 out.
Tensor complex_from_parts(const Tensor& real, const Tensor& imag);

}  // namespace dtensor::kernels
