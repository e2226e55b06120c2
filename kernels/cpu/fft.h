// Discrete Fourier transforms over chosen dims with torch's semantics (ATen's _fft_c2c, _fft_r2c and
// _fft_c2r, aten/src/ATen/native/native_functions.yaml; torch.fft.* reach them), computed by Eigen's
// FFT module (unsupported/Eigen/FFT, its kissfft backend: any length, radix 2/3/4/5 and generic),
// one dim at a time. Host only (DT_KERNEL_HOST_ONLY: device tensors go through host copies).
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// normalization (torch's fft_norm_mode): 0 none, 1 times 1/sqrt(n), 2 times 1/n, where n is the
// product of the signal sizes over `dim` (for c2r: of the output's). `dim`: distinct dims of the
// input, each in [-rank, rank); none empty is required of the transformed sizes.

// Complex to complex: x complex64/complex128; forward uses exp(-2 pi i jk / n), inverse exp(+...),
// neither scaled beyond `normalization`. Output: x's shape and dtype.
Tensor fft_c2c(const Tensor& x, const std::vector<int64_t>& dim, int64_t normalization, bool forward);

// Real to complex (forward): x float32/float64 (complex64/complex128 out). onesided: the last dim of
// `dim` keeps n/2 + 1 entries (the rest are the conjugates of those, Hermitian symmetry).
Tensor fft_r2c(const Tensor& x, const std::vector<int64_t>& dim, int64_t normalization, bool onesided);

// Complex to real (inverse of r2c): x complex64/complex128, onesided along the last dim of `dim`,
// whose first last_dim_size / 2 + 1 entries are read (x must have that many); the output has
// last_dim_size there and float32/float64 dtype. The imaginary parts of the entries that must be
// real for Hermitian symmetry (index 0, and n/2 for even n) are ignored, as torch (pocketfft) does.
Tensor fft_c2r(const Tensor& x, const std::vector<int64_t>& dim, int64_t normalization, int64_t last_dim_size);

// torch's fft_r2c_backward (FunctionsManual): the real part of the inverse c2c (same normalization)
// of grad (complex), zero-padded to last_dim_size along the last dim of `dim` when onesided.
// Output: float32/float64, grad's shape with last_dim_size there.
Tensor fft_r2c_backward(const Tensor& grad, const std::vector<int64_t>& dim, int64_t normalization, bool onesided,
                        int64_t last_dim_size);

// torch's fft_c2r_backward: the onesided r2c (same normalization) of grad (float32/float64), with
// the entries 1 .. n - (n/2 + 1) along the last dim of `dim` doubled (each stands for two conjugate
// points of the full spectrum). Output: complex, n/2 + 1 entries there.
Tensor fft_c2r_backward(const Tensor& grad, const std::vector<int64_t>& dim, int64_t normalization);

}  // namespace dtensor::kernels
